package chattemplate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func mustRender(t *testing.T, tmpl *Template, messages, tools string, o Options) string {
	t.Helper()
	out, err := tmpl.Render(raw(messages), raw(tools), o)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

func TestLoadListFormPicksDefaultAndToolUse(t *testing.T) {
	cfg := `{"chat_template": [
		{"name": "default", "template": "D{{ messages|length }}{{ bos_token }}"},
		{"name": "tool_use", "template": "T{{ tools|length }}{{ eos_token }}"},
		{"name": "rag", "template": "R"}],
		"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
		"eos_token": "</s>"}`
	tmpl, err := Load([]byte(cfg), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tmpl.Names(), ","); got != "default,rag,tool_use" {
		t.Fatalf("Names = %s", got)
	}
	msgs := `[{"role":"user","content":"x"}]`
	if got := mustRender(t, tmpl, msgs, "", Options{}); got != "D1<s>" {
		t.Fatalf("no tools: %q", got)
	}
	if got := mustRender(t, tmpl, msgs, `[{"a":1},{"b":2}]`, Options{}); got != "T2</s>" {
		t.Fatalf("tools: %q", got)
	}
	// HuggingFace picks tool_use for any non-None tools, even an empty list.
	if got := mustRender(t, tmpl, msgs, `[]`, Options{}); got != "T0</s>" {
		t.Fatalf("empty tools: %q", got)
	}
	if got := mustRender(t, tmpl, msgs, "", Options{TemplateName: "rag"}); got != "R" {
		t.Fatalf("named: %q", got)
	}
	if _, err := tmpl.Render(raw(msgs), nil, Options{TemplateName: "nope"}); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("unknown name: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	for name, cfg := range map[string]string{
		"not json":        `{`,
		"template number": `{"chat_template": 5}`,
		"bad token":       `{"chat_template": "x", "bos_token": 5}`,
		"syntax error":    `{"chat_template": "{% if %}"}`,
		"no default":      `{"chat_template": [{"name": "a", "template": "A"}, {"name": "b", "template": "B"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Load([]byte(cfg), DefaultConfig())
			if name == "no default" {
				// Loads, but rendering without a name has nothing to pick.
				if err != nil {
					t.Fatal(err)
				}
				_, err = tmpl.Render(raw(oneMsg), nil, Options{})
				if !errors.Is(err, ErrNoTemplate) {
					t.Fatalf("err = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadTemplate) {
				t.Fatalf("err = %v, want ErrBadTemplate", err)
			}
		})
	}
	if _, err := Load([]byte(`{"eos_token": "x"}`), DefaultConfig()); !errors.Is(err, ErrNoTemplate) {
		t.Fatalf("missing chat_template: %v", err)
	}
	if _, err := Load([]byte(`{"chat_template": "x"}`), Config{}); err == nil {
		t.Fatal("zero Config accepted")
	}
}

func TestSpecialTokensVisibleAndUnsetUndefined(t *testing.T) {
	toks, err := SpecialTokensFromConfig([]byte(`{"bos_token": null, "eos_token": {"content": "<|im_end|>"}, "additional_special_tokens": ["<a>", {"content": "<b>"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Compile(`{{ bos_token is defined }}|{{ eos_token }}|{{ additional_special_tokens|join(",") }}`, toks, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := mustRender(t, tmpl, oneMsg, "", Options{}); got != "False|<|im_end|>|<a>,<b>" {
		t.Fatalf("got %q", got)
	}
}

func TestStrftimeNowUsesInjectedTime(t *testing.T) {
	// Llama 3.1 writes the date this way.
	tmpl, err := Compile(`Today Date: {{ strftime_now("%d %b %Y") }} {{ strftime_now("%A %B %e %I:%M:%S %p %j %y %%") }}`, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, time.July, 6, 15, 4, 5, 0, time.UTC)
	got := mustRender(t, tmpl, oneMsg, "", Options{Now: now})
	want := "Today Date: 06 Jul 2024 Saturday July  6 03:04:05 PM 188 24 %"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// A template that rejects a role with raise_exception: the error names the
// template's message and wraps ErrRaised.
func TestRaiseExceptionIsErrRaised(t *testing.T) {
	src := `{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Unsupported role: ' + m.role) }}{% endif %}{{ m.content }}{% endfor %}`
	tmpl, err := Compile(src, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(raw(`[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]`), nil, Options{})
	if !errors.Is(err, ErrRaised) || !strings.Contains(err.Error(), "Unsupported role: wizard") {
		t.Fatalf("err = %v", err)
	}
}

func TestKwargsOrderAndOverride(t *testing.T) {
	tmpl, err := Compile(`{{ cfg|tojson }}|{{ add_generation_prompt }}|{{ messages|length }}`, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := mustRender(t, tmpl, `[{"role":"user"}]`, "", Options{
		AddGenerationPrompt: true,
		Kwargs:              json.RawMessage(`{"cfg": {"z": 1, "a": [true, null, 2.5, "é<>&"], "m": {}}, "add_generation_prompt": false, "messages": []}`),
	})
	want := `{"z": 1, "a": [true, null, 2.5, "é<>&"], "m": {}}|True|1`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestVLLMPreprocessPartsFormat(t *testing.T) {
	// A template that loops over content parts gets vLLM's "openai" format:
	// text parts as {"type": "text", "text": ...}, strings wrapped too.
	src := `{% for m in messages %}[{{ m.role }}:{% for p in m.content %}<{{ p.type }}={{ p.text }}>{% endfor %}]{% endfor %}`
	tmpl, err := Compile(src, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_text","text":"b"},{"type":"text","text":null}]},{"role":"assistant","content":"c"},{"role":"assistant","content":null}]`
	got := mustRender(t, tmpl, msgs, "", Options{Preprocess: PreprocessVLLM})
	if want := "[user:<text=a><text=b>][assistant:<text=c>][assistant:]"; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Images cannot be rendered faithfully: refused, not dropped.
	_, err = tmpl.Render(raw(`[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]`), nil, Options{Preprocess: PreprocessVLLM})
	if !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("image part: %v", err)
	}
}

func TestContinueFinalMessageErrors(t *testing.T) {
	tmpl := qwen3(t)
	msgs := `[{"role":"user","content":"q"},{"role":"assistant","content":"partial"}]`
	if _, err := tmpl.Render(raw(msgs), nil, Options{ContinueFinalMessage: true, AddGenerationPrompt: true}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("both set: %v", err)
	}
	if _, err := tmpl.Render(raw(`[]`), nil, Options{ContinueFinalMessage: true}); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("no messages: %v", err)
	}
	// Parts: the last part with text is continued.
	got := mustRender(t, tmpl, `[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]`, "",
		Options{ContinueFinalMessage: true, Preprocess: PreprocessVLLM})
	if !strings.HasSuffix(got, "one\ntwo") {
		t.Fatalf("got %q", got)
	}
}

func TestParseChatRequest(t *testing.T) {
	r, err := ParseChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"b":1,"a":2}],"chat_template_kwargs":{"enable_thinking":false},"temperature":0.2}`))
	if err != nil {
		t.Fatal(err)
	}
	o := r.Options()
	if !o.AddGenerationPrompt || string(o.Kwargs) != `{"enable_thinking":false}` || string(r.Tools) != `[{"b":1,"a":2}]` {
		t.Fatalf("options %+v tools %s", o, r.Tools)
	}
	out, err := r.Render(qwen3(t), PreprocessNone)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `{"b": 1, "a": 2}`) || !strings.HasSuffix(out, "<think>\n\n</think>\n\n") {
		t.Fatalf("rendered %q", out)
	}
	cont, err := ParseChatRequest([]byte(`{"messages":[],"continue_final_message":true}`))
	if err != nil || cont.Options().AddGenerationPrompt || !cont.Options().ContinueFinalMessage {
		t.Fatalf("continue: %v %+v", err, cont)
	}
	for _, body := range []string{
		`not json`, `{"messages": {}}`, `{"model": "m"}`, `{"messages": [], "tools": {}}`,
		`{"messages": [], "chat_template_kwargs": []}`, `{"messages": [], "continue_final_message": true, "add_generation_prompt": true}`,
		`{"messages": [], "model": 5}`,
	} {
		if _, err := ParseChatRequest([]byte(body)); !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%s: err = %v", body, err)
		}
	}
}

// oneMsg is the smallest valid conversation.
const oneMsg = `[{"role":"user","content":"x"}]`
