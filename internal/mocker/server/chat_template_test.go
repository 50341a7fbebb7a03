package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// TestChatTemplateWithTools checks that a worker given the model's chat
// template renders tools and enable_thinking as the template says (Qwen3:
// a <tools> block naming each function, an empty think block when
// thinking is off), on /tokenize and on /v1/chat/completions alike.
func TestChatTemplateWithTools(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.Load(modelfiles.Qwen3TokenizerConfig(), chattemplate.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.Tokenizer = tok
	c.ChatTemplate = tmpl
	r := start(t, c)

	tools := json.RawMessage(`[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`)
	msgs := json.RawMessage(`[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"}]`)
	req := map[string]any{"model": "mock-model", "messages": msgs, "tools": tools,
		"chat_template_kwargs": map[string]any{"enable_thinking": false}}

	code, body := post(t, r.url+"/tokenize", req)
	if code != 200 {
		t.Fatalf("tokenize: %d %s", code, body)
	}
	var tr struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &tr); err != nil {
		t.Fatal(err)
	}
	text := tok.Decode(tr.Tokens)
	for _, want := range []string{"<tools>", `"name": "get_weather"`, "Be brief.", "<|im_start|>user\nWeather in Paris?<|im_end|>",
		"<|im_start|>assistant\n<think>\n\n</think>\n\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, text)
		}
	}
	if !strings.HasSuffix(text, "</think>\n\n") {
		t.Errorf("prompt does not end with the generation prompt:\n%q", text)
	}

	// The same body on the chat endpoint counts the same prompt tokens.
	req["max_tokens"] = 2
	code, body = post(t, r.url+"/v1/chat/completions", req)
	if code != 200 {
		t.Fatalf("chat: %d %s", code, body)
	}
	var cr completion
	if err := json.Unmarshal(body, &cr); err != nil || cr.Usage == nil {
		t.Fatalf("chat body %s: %v", body, err)
	}
	if cr.Usage.PromptTokens != tr.Count {
		t.Fatalf("chat counted %d prompt tokens, /tokenize %d", cr.Usage.PromptTokens, tr.Count)
	}

	// Without the template, the fallback ignores tools: fewer tokens.
	c2 := testConfig()
	c2.Tokenizer = tok
	r2 := start(t, c2)
	code, body = post(t, r2.url+"/tokenize", req)
	if code != 200 {
		t.Fatalf("fallback tokenize: %d %s", code, body)
	}
	var fr struct {
		Count int `json:"count"`
	}
	_ = json.Unmarshal(body, &fr)
	if fr.Count >= tr.Count {
		t.Fatalf("fallback rendering %d tokens, template %d: tools not rendered by the template?", fr.Count, tr.Count)
	}
}
