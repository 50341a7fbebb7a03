package config

import (
	"errors"
	"fmt"
	"strings"
)

// ModelSpec is one served model besides the default: its name and the
// folder of its tokenizer files ("" for none).
type ModelSpec struct {
	// Name is the model name requests carry and workers declare.
	Name string
	// TokenizerDir holds its tokenizer.json and tokenizer_config.json;
	// empty means none (approximate routing of text prompts).
	TokenizerDir string
}

// maxModels bounds --model's list.
const maxModels = 256

// listFlag marks flag values a YAML list may set (its entries joined with
// commas).
type listFlag interface{ list() }

func (*listValue) list()   {}
func (*modelsValue) list() {}

// modelsValue is --model: NAME[=DIR],...; the first entry sets Model (and
// TokenizerDir when it has a DIR), the others Models. Each Set replaces
// the list, so a later layer overrides an earlier one.
type modelsValue struct{ c *Config }

func (m *modelsValue) String() string {
	if m == nil || m.c == nil {
		return ""
	}
	parts := []string{m.c.Model}
	for _, s := range m.c.Models {
		p := s.Name
		if s.TokenizerDir != "" {
			p += "=" + s.TokenizerDir
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}

func (m *modelsValue) Set(s string) error {
	var specs []ModelSpec
	for p := range strings.SplitSeq(s, ",") {
		name, dir, _ := strings.Cut(strings.TrimSpace(p), "=")
		specs = append(specs, ModelSpec{Name: strings.TrimSpace(name), TokenizerDir: strings.TrimSpace(dir)})
	}
	if len(specs) > maxModels+1 {
		return fmt.Errorf("%d models, at most %d", len(specs), maxModels+1)
	}
	m.c.Model = specs[0].Name
	if specs[0].TokenizerDir != "" {
		m.c.TokenizerDir = specs[0].TokenizerDir
	}
	m.c.Models = specs[1:]
	if len(m.c.Models) == 0 {
		m.c.Models = nil
	}
	return checkModels(m.c.Model, m.c.Models)
}

// checkModels refuses empty and repeated model names.
func checkModels(def string, more []ModelSpec) error {
	seen := map[string]bool{def: true}
	for _, s := range more {
		switch {
		case s.Name == "":
			return errors.New("empty model name in the list")
		case seen[s.Name]:
			return fmt.Errorf("model %q listed twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}
