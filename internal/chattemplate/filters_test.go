package chattemplate

import (
	"errors"
	"testing"
)

func TestRewriteReplacedFilters(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{{ x | map('trim') | join }}`, `{{ x | kvrouter_map('trim') | join }}`},
		{`{{ x|trim }}{{ x|trimmed }}{{ 'a|trim' }}`, `{{ x|kvrouter_trim }}{{ x|trimmed }}{{ 'a|trim' }}`},
		{`{% set y = x | map(attribute='a') | list %}`, `{% set y = x | kvrouter_map(attribute='a') | list %}`},
		{`text | map {{ mapping }}`, `text | map {{ mapping }}`},
	} {
		if got := rewriteToJSON(c.in); got != c.want {
			t.Errorf("rewriteToJSON(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// map with a filter name the package does not implement fails instead of
// returning the items unchanged.
func TestMapUnsupportedFilterFails(t *testing.T) {
	tmpl, err := Compile(`{{ messages | map(attribute='content') | map('title') | join }}`, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]byte(`[{"role":"user","content":"a b"}]`), nil, Options{})
	if !errors.Is(err, ErrRender) {
		t.Fatalf("err %v, want ErrRender", err)
	}
}
