package frontend

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// post sends body to url and decodes the JSON answer into v.
func postJSON(t *testing.T, url string, body any, v any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(rb, v); err != nil {
			t.Fatalf("%s: %s: %v", url, rb, err)
		}
	}
	return resp.StatusCode
}

// /tokenize answers what the router computes in vLLM's shape: a prompt
// encodes as the worker's own /tokenize encodes it (special tokens by
// default for a prompt, not for a conversation), a conversation as the
// chat template renders it, and /detokenize reverses it.
func TestTokenizeAndDetokenize(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1})
	tok := testTokenizer(t)
	text := "Hello, world! 你好 — tabs\tand  double  spaces <|im_start|> 1234567"
	for _, req := range []map[string]any{{"prompt": text}, {"prompt": text, "add_special_tokens": false}, {"model": testModel, "prompt": ""}} {
		var got, worker tokenizeResponse
		if code := postJSON(t, fl.front.URL+"/tokenize", req, &got); code != 200 {
			t.Fatalf("%v: status %d", req, code)
		}
		if code := postJSON(t, fl.mocks[0].url+"/tokenize", req, &worker); code != 200 {
			t.Fatalf("worker %v: status %d", req, code)
		}
		want := tok.Encode(req["prompt"].(string), req["add_special_tokens"] != false)
		if !slices.Equal(got.Tokens, want) || !slices.Equal(got.Tokens, worker.Tokens) || got.Count != len(want) || got.MaxModelLen != 131072 || got.TokenStrs != nil {
			t.Fatalf("%v: router %+v, worker %v, tokenizer %v", req, got, worker.Tokens, want)
		}
		var back struct {
			Prompt string `json:"prompt"`
		}
		if code := postJSON(t, fl.front.URL+"/detokenize", map[string]any{"model": testModel, "tokens": got.Tokens}, &back); code != 200 || back.Prompt != req["prompt"] {
			t.Fatalf("detokenize %v: status %d, %q", got.Tokens, code, back.Prompt)
		}
	}

	msgs := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}}
	for _, gen := range []bool{true, false} {
		var got tokenizeResponse
		if code := postJSON(t, fl.front.URL+"/tokenize", map[string]any{"messages": msgs, "add_generation_prompt": gen, "return_token_strs": true}, &got); code != 200 {
			t.Fatalf("chat: status %d", code)
		}
		raw, _ := json.Marshal(msgs)
		rendered, err := testTemplate(t).Render(raw, nil, chattemplate.Options{AddGenerationPrompt: gen, Preprocess: chattemplate.PreprocessVLLM})
		if err != nil {
			t.Fatal(err)
		}
		want := tok.Encode(rendered, false)
		if !slices.Equal(got.Tokens, want) || len(got.TokenStrs) != len(want) {
			t.Fatalf("chat (generation prompt %v): %v, want %v", gen, got.Tokens, want)
		}
		for i, id := range want {
			if s, _ := tok.IDToToken(id); got.TokenStrs[i] != s {
				t.Fatalf("token_strs[%d] = %q, want %q", i, got.TokenStrs[i], s)
			}
		}
	}

	for _, c := range []struct {
		path, body string
		status     int
		param      string
	}{
		{"/tokenize", `{"model":"gpt-9","prompt":"x"}`, 404, "model"},
		{"/tokenize", `{"prompt":"x","messages":[{"role":"user","content":"x"}]}`, 400, "prompt"},
		{"/tokenize", `{}`, 400, "messages"},
		{"/tokenize", `{"prompt":5}`, 400, "prompt"},
		{"/tokenize", `[`, 400, ""},
		{"/detokenize", `{"tokens":[1,-1]}`, 400, "tokens"},
		{"/detokenize", `{"tokens":[99999999]}`, 400, "tokens"},
		{"/detokenize", `{}`, 400, "tokens"},
		{"/detokenize", `{"model":"gpt-9","tokens":[1]}`, 404, "model"},
	} {
		resp, body := fl.do("POST", c.path, c.body)
		var e struct {
			Error struct {
				Param *string `json:"param"`
			} `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		if resp.StatusCode != c.status || param != c.param {
			t.Errorf("%s %s: %d param %q, want %d %q: %s", c.path, c.body, resp.StatusCode, param, c.status, c.param, body)
		}
	}
	if resp, _ := fl.do("GET", "/tokenize", nil); resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("GET /tokenize: %d", resp.StatusCode)
	}
}

// A model the router has no tokenizer for refuses /tokenize and
// /detokenize (its text is routed by a hash of the text).
func TestTokenizeWithoutTokenizer(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 0})
	fl.f.models = stubModels{"model-b": {}}
	for _, path := range []string{"/tokenize", "/detokenize"} {
		resp, body := fl.do("POST", path, `{"model":"model-b","prompt":"x","tokens":[1]}`)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "no tokenizer") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// stubModels is a Models of fixed files, with no workers.
type stubModels map[string]ModelFiles

func (s stubModels) Model(name string) (ModelFiles, bool)  { m, ok := s[name]; return m, ok }
func (stubModels) Routable() []string                      { return nil }
func (stubModels) ModelOf(kvevent.WorkerID) (string, bool) { return "", false }

// FuzzTokenizeRequests: no body makes /tokenize or /detokenize fail
// otherwise than with a 4xx in the router's error shape, and every 200
// is self-consistent.
func FuzzTokenizeRequests(f *testing.F) {
	for _, s := range []string{`{"prompt":"hi"}`, `{"prompt":"hi","add_special_tokens":false,"return_token_strs":true}`,
		`{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}`, `{"messages":"x"}`, `{"tokens":[1,2,3]}`,
		`{"tokens":[4294967296]}`, `{"model":5}`, `{"prompt":null,"messages":null}`, `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, `[`} {
		f.Add(false, s)
		f.Add(true, s)
	}
	fl := newFleet(f, fleetOpt{workers: 0, cfg: func(c *Config) { c.MaxPromptTokens = 4096 }})
	h := fl.f.Handler()
	f.Fuzz(func(t *testing.T, detok bool, body string) {
		path := "/tokenize"
		if detok {
			path = "/detokenize"
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		b := rec.Body.Bytes()
		switch {
		case rec.Code == 200 && detok:
			var v struct {
				Prompt *string `json:"prompt"`
			}
			if err := json.Unmarshal(b, &v); err != nil || v.Prompt == nil {
				t.Fatalf("%s %q: 200 %s", path, body, b)
			}
		case rec.Code == 200:
			var v tokenizeResponse
			if err := json.Unmarshal(b, &v); err != nil || v.Count != len(v.Tokens) || v.Tokens == nil || (v.TokenStrs != nil && len(v.TokenStrs) != v.Count) {
				t.Fatalf("%s %q: 200 %s", path, body, b)
			}
		case rec.Code >= 400 && rec.Code < 500:
			var e struct {
				Error struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%s %q: %d not in the router's error shape: %s", path, body, rec.Code, b)
			}
		default:
			t.Fatalf("%s %q: %d %s", path, body, rec.Code, b)
		}
	})
}

func (stubModels) Adapter(string) (string, []kvevent.WorkerID, bool) { return "", nil, false }
func (stubModels) AdapterMissing(kvevent.WorkerID, string)           {}
func (stubModels) Adapters() []string                                { return nil }
