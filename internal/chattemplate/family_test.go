package chattemplate

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// familyConfig returns a family's tokenizer_config.json from
// internal/modelfiles/testdata, decompressing the .gz copy if that is what
// is kept.
func familyConfig(t testing.TB, family string) []byte {
	t.Helper()
	p := filepath.Join("..", "modelfiles", "testdata", family, "tokenizer_config.json")
	if b, err := os.ReadFile(p); err == nil {
		return b
	}
	gz, err := os.ReadFile(p + ".gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenFamilies renders the cases of testdata/<family>_golden.json
// (tools/tmplgold/families.mjs: @huggingface/jinja 0.5.11, checked with
// Python's Jinja2 by pycheck.py) with each family's own chat template and
// compares byte for byte; where either reference fails, Render must fail.
// The templates use namespace(), messages[1:], loop.first / loop.index0,
// is string / is iterable / is none, | trim and raise_exception.
func TestGoldenFamilies(t *testing.T) {
	for _, fam := range []string{"llama3.1", "deepseek-v3", "gemma3"} {
		t.Run(fam, func(t *testing.T) {
			tmpl, err := Load(familyConfig(t, fam), DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile("testdata/" + fam + "_golden.json")
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Cases []goldenCase `json:"cases"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.Cases) < 7 {
				t.Fatalf("only %d cases", len(doc.Cases))
			}
			for _, c := range doc.Cases {
				t.Run(c.Name, func(t *testing.T) {
					got, err := tmpl.Render(raw(c.Messages), raw(c.Tools), c.options())
					if c.Messages == "[]" {
						// The references render some templates without
						// messages; Render refuses them on principle (OpenAI
						// requires one), whatever the template.
						if !errors.Is(err, ErrInvalidInput) {
							t.Fatalf("no messages: err %v, want ErrInvalidInput", err)
						}
						return
					}
					if c.Expected == nil || c.Python.Error != "" {
						if err == nil {
							t.Fatalf("reference failed (js: %q, python: %q) but Render succeeded:\n%q", c.Error, c.Python.Error, got)
						}
						if !errors.Is(err, ErrRender) && !errors.Is(err, ErrRaised) && !errors.Is(err, ErrInvalidInput) {
							t.Fatalf("error %v wraps no input/render sentinel", err)
						}
						return
					}
					if !c.Python.Agrees {
						t.Fatalf("golden file not checked against Python (run tools/tmplgold/pycheck.py --write --family %s)", fam)
					}
					if err != nil {
						t.Fatalf("Render: %v", err)
					}
					if got != *c.Expected {
						t.Fatalf("mismatch\n got: %q\nwant: %q", got, *c.Expected)
					}
				})
			}
		})
	}
}
