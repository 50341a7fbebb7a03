package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// A worker with LoRA adapters lists them on /v1/models (parent: the
// served model), serves requests naming them, and refuses others; the
// adapter's prompt misses the base model's cache and hits its own.
func TestLoRAAdapters(t *testing.T) {
	c := testConfig()
	c.LoRAAdapters = []string{"sql-lora", "chat-lora"}
	r := start(t, c)
	resp, err := http.Get(r.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var ml struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ml)
	resp.Body.Close()
	if err != nil || len(ml.Data) != 3 || ml.Data[0].ID != "mock-model" || ml.Data[0].Parent != nil ||
		ml.Data[1].ID != "sql-lora" || ml.Data[1].Parent == nil || *ml.Data[1].Parent != "mock-model" || ml.Data[2].ID != "chat-lora" {
		t.Fatalf("/v1/models: %+v %v", ml, err)
	}
	prompt := make([]int, 40)
	for i := range prompt {
		prompt[i] = 500 + i
	}
	cached := func(model string) int {
		t.Helper()
		code, body := post(t, r.url+"/v1/completions", map[string]any{"model": model, "prompt": prompt, "max_tokens": 1})
		if code != 200 {
			t.Fatalf("%s: %d %s", model, code, body)
		}
		var cp completion
		if err := json.Unmarshal(body, &cp); err != nil || cp.Usage == nil {
			t.Fatalf("%s: %s", model, body)
		}
		return cp.Usage.PromptTokensDetails.CachedTokens
	}
	if n := cached("mock-model"); n != 0 {
		t.Fatalf("cold: %d cached", n)
	}
	if n := cached("sql-lora"); n != 0 {
		t.Fatalf("the adapter hit %d tokens of the base model's cache", n)
	}
	if n := cached("sql-lora"); n != 32 {
		t.Fatalf("the adapter's second request: %d cached, want 32", n)
	}
	if code, _ := post(t, r.url+"/v1/completions", map[string]any{"model": "other-lora", "prompt": prompt, "max_tokens": 1}); code != 404 {
		t.Fatalf("an adapter not loaded: %d", code)
	}
	for _, bad := range [][]string{{""}, {"a", "a"}, {"mock-model"}} {
		c := testConfig()
		c.LoRAAdapters = bad
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("adapters %q: %v", bad, err)
		}
	}
}
