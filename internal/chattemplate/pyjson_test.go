package chattemplate

import (
	"encoding/json"
	"testing"
)

// Expected strings are Python 3's repr(float) / json.dumps(float) for the
// same values (python3 -c 'import json; print(json.dumps(x))').
func TestPyFloatRepr(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1e16, "1e+16"}, {1e22, "1e+22"}, {1.5e16, "1.5e+16"},
		{9999999999999998.0, "9999999999999998.0"}, {123456789012345.6, "123456789012345.6"},
		{0.0001, "0.0001"}, {0.00001, "1e-05"}, {1.0, "1.0"}, {0.1, "0.1"}, {1e-7, "1e-07"},
		{1234567.5, "1234567.5"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
		{100.0, "100.0"}, {0.30000000000000004, "0.30000000000000004"}, {-2.5e-5, "-2.5e-05"},
		{12345678901234567890.0, "1.2345678901234567e+19"},
	} {
		if got := pyFloatRepr(c.f); got != c.want {
			t.Errorf("pyFloatRepr(%v) = %s, want %s", c.f, got, c.want)
		}
	}
}

// tojson keyword arguments behave as Python's json.dumps (expected output
// from python3 with the same arguments).
func TestToJSONKeywordArguments(t *testing.T) {
	for _, c := range []struct{ src, kwargs, want string }{
		{`{{ v|tojson(indent=2) }}`, `{"v": {"b": [1, {"c": []}, {}], "a": "\u2028é\u0001"}}`,
			"{\n  \"b\": [\n    1,\n    {\n      \"c\": []\n    },\n    {}\n  ],\n  \"a\": \"\u2028é\\u0001\"\n}"},
		{`{{ v|tojson(sort_keys=true, ensure_ascii=true, separators=(',', ':')) }}`, `{"v": {"b": "é😀", "a": 1}}`,
			`{"a":1,"b":"\u00e9\ud83d\ude00"}`},
		{`{{ v|tojson(indent='\t') }}`, `{"v": [1, [2]]}`, "[\n\t1,\n\t[\n\t\t2\n\t]\n]"},
		{`{{ v | tojson }}`, `{"v": [1.0, 2, 1e16, 1234567.5]}`, `[1.0, 2, 1e+16, 1234567.5]`},
	} {
		tmpl, err := Compile(c.src, SpecialTokens{}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.Render(raw(oneMsg), nil, Options{Kwargs: json.RawMessage(c.kwargs)})
		if err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		if got != c.want {
			t.Errorf("%s\n got %q\nwant %q", c.src, got, c.want)
		}
	}
}

func TestRewriteToJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{{ x|tojson }}`, `{{ x|kvrouter_tojson }}`},
		{`{{- x | tojson(indent=2) -}}`, `{{- x | kvrouter_tojson(indent=2) -}}`},
		{`{% set s = x|tojson %}`, `{% set s = x|kvrouter_tojson %}`},
		{`text |tojson {{ "a|tojson" ~ 'b|tojson\'' }}`, `text |tojson {{ "a|tojson" ~ 'b|tojson\'' }}`},
		{`{# x|tojson #}{{ x|tojsonish }}`, `{# x|tojson #}{{ x|tojsonish }}`},
		{`{ {{ a|tojson }} }`, `{ {{ a|kvrouter_tojson }} }`},
		{`{{ unterminated|tojson`, `{{ unterminated|kvrouter_tojson`},
	} {
		if got := rewriteToJSON(c.in); got != c.want {
			t.Errorf("rewriteToJSON(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
