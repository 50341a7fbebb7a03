package chattemplate

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestBadInputIsAnErrorNotAPanic(t *testing.T) {
	tmpl := qwen3(t)
	for _, c := range []struct {
		name, messages, tools, kwargs string
		want                          error
	}{
		{"empty body", "", "", "", ErrInvalidInput},
		{"null", "null", "", "", ErrInvalidInput},
		{"empty array", "[]", "", "", ErrInvalidInput},
		{"malformed", `[{"role":"user","content":"x"`, "", "", ErrInvalidInput},
		{"trailing garbage", `[] []`, "", "", ErrInvalidInput},
		{"object not array", `{"role":"user"}`, "", "", ErrInvalidInput},
		{"message not object", `["hi"]`, "", "", ErrInvalidInput},
		{"missing role", `[{"content":"x"}]`, "", "", ErrInvalidInput},
		{"role number", `[{"role":1,"content":"x"}]`, "", "", ErrInvalidInput},
		{"content number", `[{"role":"user","content":1}]`, "", "", ErrInvalidInput},
		{"content object", `[{"role":"user","content":{"text":"x"}}]`, "", "", ErrInvalidInput},
		{"huge number", `[{"role":"user","content":"x","n":1e999}]`, "", "", ErrInvalidInput},
		{"tools object", `[{"role":"user","content":"x"}]`, `{"a":1}`, "", ErrInvalidInput},
		{"tools malformed", `[{"role":"user","content":"x"}]`, `[{]`, "", ErrInvalidInput},
		{"kwargs array", `[{"role":"user","content":"x"}]`, "", `[1]`, ErrInvalidInput},
		{"too deep", `[{"role":"user","content":"x","deep":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]`, "", "", ErrInvalidInput},
		// Qwen3 calls content.startswith on a user message: a list fails
		// there, as it does in the reference engine and in Python.
		{"content parts reach template", `[{"role":"user","content":[{"type":"text","text":"x"}]}]`, "", "", ErrRender},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := tmpl.Render(raw(c.messages), raw(c.tools), Options{Kwargs: raw(c.kwargs)})
			if !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxInputBytes = 100
	cfg.MaxMessages = 2
	tmpl, err := Load(qwen3Config(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	big := `[{"role":"user","content":"` + strings.Repeat("a", 100) + `"}]`
	if _, err := tmpl.Render(raw(big), nil, Options{}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("big messages: %v", err)
	}
	if _, err := tmpl.Render(raw(`[{"role":"user","content":"x"}]`), raw(`[`+strings.Repeat(`{},`, 40)+`{}]`), Options{}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("big tools: %v", err)
	}
	three := `[{"role":"user"},{"role":"user"},{"role":"user"}]`
	if _, err := tmpl.Render(raw(three), nil, Options{}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("three messages: %v", err)
	}
	if _, err := tmpl.Render(raw(`[{"role":"user","content":"ok"}]`), nil, Options{}); err != nil {
		t.Fatalf("small input refused: %v", err)
	}
}

// Rendering the same compiled template from many goroutines must give the
// reference output every time (run with -race).
func TestConcurrentRender(t *testing.T) {
	tmpl := qwen3(t)
	cases := loadGolden(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				c := cases[(g+i)%len(cases)]
				got, err := tmpl.Render(raw(c.Messages), raw(c.Tools), c.options())
				if _, lenient := lenientCases[c.Name]; lenient {
					continue
				}
				if c.Expected == nil {
					if err == nil {
						errs <- errors.New(c.Name + ": want error")
						return
					}
					continue
				}
				if err != nil || got != *c.Expected {
					errs <- errors.New(c.Name + ": mismatch")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A template that mutates the lists it is given must not leak the change
// into the next render (special-token lists are rebuilt per render).
func TestRendersDoNotShareMutableState(t *testing.T) {
	tmpl, err := Compile(`{% set _ = additional_special_tokens.append('X') %}{{ additional_special_tokens|length }}`,
		SpecialTokens{Additional: []string{"<a>"}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := mustRender(t, tmpl, oneMsg, "", Options{}); got != "2" {
			t.Fatalf("got %q", got)
		}
	}
}

func FuzzRender(f *testing.F) {
	for _, c := range loadGolden(f) {
		f.Add([]byte(c.Messages), []byte(c.Tools), []byte(c.Kwargs))
	}
	f.Add([]byte(`[{"role":"user","content":[1,{"type":"text"}]}]`), []byte(`[]`), []byte(`{"enable_thinking":1}`))
	f.Add([]byte(`[{"role":"assistant","content":null,"tool_calls":[{"function":{"arguments":"{\"a\":"}}]}]`), []byte(nil), []byte(nil))
	tmpl := qwen3(f)
	f.Fuzz(func(t *testing.T, messages, tools, kwargs []byte) {
		for _, p := range []Preprocess{PreprocessNone, PreprocessVLLM} {
			for _, cont := range []bool{false, true} {
				_, err := tmpl.Render(messages, tools, Options{Kwargs: kwargs, Preprocess: p, AddGenerationPrompt: !cont, ContinueFinalMessage: cont})
				if err != nil && !errors.Is(err, ErrInvalidInput) && !errors.Is(err, ErrRender) && !errors.Is(err, ErrRaised) {
					t.Fatalf("error wraps no input/render sentinel: %v", err)
				}
				if err == nil && !json.Valid(messages) {
					t.Fatalf("accepted invalid JSON %q", messages)
				}
			}
		}
	})
}
