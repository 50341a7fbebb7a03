package config

import (
	"errors"
	"slices"
	"testing"
)

// --model takes a list: the first entry is the default model (its DIR
// the tokenizer folder), the others are served besides it; a later layer
// replaces the whole list.
func TestModelList(t *testing.T) {
	c, err := Load([]string{"--model", "org/a=/models/a, org/b=/models/b,org/c"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []ModelSpec{{"org/b", "/models/b"}, {"org/c", ""}}
	if c.Model != "org/a" || c.TokenizerDir != "/models/a" || !slices.Equal(c.Models, want) {
		t.Fatalf("model %q dir %q models %+v", c.Model, c.TokenizerDir, c.Models)
	}
	p := writeFile(t, "model:\n  - org/x\n  - org/y=/models/y\n")
	c, err = Load([]string{"--config", p}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "org/x" || c.TokenizerDir != "" || !slices.Equal(c.Models, []ModelSpec{{"org/y", "/models/y"}}) {
		t.Fatalf("from the file: model %q dir %q models %+v", c.Model, c.TokenizerDir, c.Models)
	}
	c, err = Load([]string{"--config", p, "--model", "org/z"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "org/z" || c.Models != nil {
		t.Fatalf("the flag did not replace the file's list: %q %+v", c.Model, c.Models)
	}
	for _, bad := range []string{"org/a,org/a", "org/a,,org/b", ",org/b", "org/a,org/b,org/b=/d"} {
		if _, err := Load([]string{"--model", bad}, Options{}); !errors.Is(err, ErrUsage) && !errors.Is(err, ErrInvalid) {
			t.Errorf("--model %q: %v, want a refusal", bad, err)
		}
	}
}
