package chattemplate

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// tenMessages is a 10-message conversation: system, then alternating
// user/assistant turns of a few hundred bytes, ending with a user turn.
func tenMessages() json.RawMessage {
	var parts []string
	parts = append(parts, `{"role":"system","content":"You are a helpful assistant that answers concisely and cites sources when asked."}`)
	for i := range 9 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		content := strings.Repeat(fmt.Sprintf("Turn %d talks about KV caches, prefix reuse and routing. ", i), 5)
		parts = append(parts, fmt.Sprintf(`{"role":%q,"content":%q}`, role, content))
	}
	return json.RawMessage("[" + strings.Join(parts, ",") + "]")
}

func BenchmarkRender10Messages(b *testing.B) {
	tmpl := qwen3(b)
	msgs := tenMessages()
	b.SetBytes(int64(len(msgs)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(msgs, nil, Options{AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender10MessagesWithTools(b *testing.B) {
	tmpl := qwen3(b)
	msgs := tenMessages()
	var tools json.RawMessage
	for _, c := range loadGolden(b) {
		if c.Name == "tools_with_system" {
			tools = json.RawMessage(c.Tools)
		}
	}
	b.SetBytes(int64(len(msgs) + len(tools)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpl.Render(msgs, tools, Options{AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender10MessagesParallel(b *testing.B) {
	tmpl := qwen3(b)
	msgs := tenMessages()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := tmpl.Render(msgs, nil, Options{AddGenerationPrompt: true}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
