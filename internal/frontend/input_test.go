package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

func TestBadInput(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxPromptTokens = 1000
	}})
	long := strings.Repeat("hello ", 2000) // ~2000 tokens, 12 KB: under the body limit
	cases := []struct {
		name, path string
		body       string
		status     int
		typ, code  string
		param      string // "" means any
	}{
		{"malformed json", "/v1/completions", `{"prompt": "hi"`, 400, typeInvalidRequest, codeInvalidJSON, ""},
		{"malformed chat json", "/v1/chat/completions", `[1,2`, 400, typeInvalidRequest, codeInvalidJSON, ""},
		{"no prompt", "/v1/completions", `{"max_tokens": 3}`, 400, typeInvalidRequest, "", "prompt"},
		{"prompt wrong type", "/v1/completions", `{"prompt": {"a":1}}`, 400, typeInvalidRequest, "", "prompt"},
		{"negative token id", "/v1/completions", `{"prompt": [1, -2, 3]}`, 400, typeInvalidRequest, "", "prompt"},
		{"fractional token id", "/v1/completions", `{"prompt": [1.5]}`, 400, typeInvalidRequest, "", "prompt"},
		{"empty prompt list", "/v1/completions", `{"prompt": []}`, 400, typeInvalidRequest, "", "prompt"},
		{"messages not a list", "/v1/chat/completions", `{"messages": "hi"}`, 400, typeInvalidRequest, codeInvalidType, "messages"},
		{"no messages", "/v1/chat/completions", `{"max_tokens": 3}`, 400, typeInvalidRequest, "", "messages"},
		{"message without role", "/v1/chat/completions", `{"messages": [{"content": "hi"}]}`, 400, typeInvalidRequest, "", "messages"},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "hi"}`, 404, typeNotFound, codeModelNotFound, "model"},
		{"unknown model chat", "/v1/chat/completions", `{"model": "gpt-9", "messages": [{"role":"user","content":"hi"}]}`, 404, typeNotFound, codeModelNotFound, "model"},
		{"body too large", "/v1/completions", `{"prompt": "` + strings.Repeat("x", 70<<10) + `"}`, 413, typeInvalidRequest, codeTooLarge, ""},
		{"prompt too many tokens", "/v1/completions", `{"prompt": "` + long + `"}`, 413, typeInvalidRequest, codeContextLength, "prompt"},
		{"token ids too many", "/v1/completions", `{"prompt": [` + strings.Repeat("1,", 1000) + `1]}`, 413, typeInvalidRequest, codeContextLength, "prompt"},
		{"chat too many tokens", "/v1/chat/completions", `{"messages": [{"role":"user","content":"` + long + `"}]}`, 413, typeInvalidRequest, codeContextLength, "messages"},
		{"max_tokens zero", "/v1/completions", `{"prompt": "hi", "max_tokens": 0}`, 400, typeInvalidRequest, codeBelowMin, "max_tokens"},
		{"max_tokens negative", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "max_tokens": -1}`, 400, typeInvalidRequest, codeBelowMin, "max_tokens"},
		{"max_tokens 2^63-1", "/v1/completions", `{"prompt": "hi", "max_tokens": 9223372036854775807}`, 400, typeInvalidRequest, codeAboveMax, "max_tokens"},
		{"max_tokens 2^64", "/v1/completions", `{"prompt": "hi", "max_tokens": 18446744073709551616}`, 400, typeInvalidRequest, codeAboveMax, "max_tokens"},
		{"max_tokens over the cap", "/v1/completions", `{"prompt": "hi", "max_tokens": 131073}`, 400, typeInvalidRequest, codeAboveMax, "max_tokens"},
		{"max_completion_tokens absurd", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "max_completion_tokens": 9223372036854775807}`, 400, typeInvalidRequest, codeAboveMax, "max_completion_tokens"},
		{"max_tokens a string", "/v1/completions", `{"prompt": "hi", "max_tokens": "10"}`, 400, typeInvalidRequest, codeInvalidType, "max_tokens"},
		{"max_tokens a fraction", "/v1/completions", `{"prompt": "hi", "max_tokens": 1.5}`, 400, typeInvalidRequest, codeInvalidType, "max_tokens"},
		{"n zero", "/v1/completions", `{"prompt": "hi", "n": 0}`, 400, typeInvalidRequest, codeBelowMin, "n"},
		{"n absurd", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "n": 100000}`, 400, typeInvalidRequest, codeAboveMax, "n"},
		{"n a string", "/v1/completions", `{"prompt": "hi", "n": "2"}`, 400, typeInvalidRequest, codeInvalidType, "n"},
		{"stream not a boolean", "/v1/completions", `{"prompt": "hi", "stream": "yes"}`, 400, typeInvalidRequest, codeInvalidType, "stream"},
		{"model not a string", "/v1/completions", `{"prompt": "hi", "model": 5}`, 400, typeInvalidRequest, codeInvalidType, "model"},
		{"route max_tokens absurd", "/v1/route", `{"prompt": "hi", "max_tokens": 9223372036854775807}`, 400, typeInvalidRequest, codeAboveMax, "max_tokens"},
		{"route max_tokens a string", "/v1/route", `{"prompt": "hi", "max_tokens": "x"}`, 400, typeInvalidRequest, codeInvalidType, "max_tokens"},
		{"query tokens wrong", "/v1/query", `{"tokens": [1, -1]}`, 400, typeInvalidRequest, "", "tokens"},
		{"cache_salt empty", "/v1/completions", `{"prompt": "hi", "cache_salt": ""}`, 400, typeInvalidRequest, codeInvalidType, "cache_salt"},
		{"cache_salt a number", "/v1/chat/completions", `{"messages": [{"role":"user","content":"hi"}], "cache_salt": 7}`, 400, typeInvalidRequest, codeInvalidType, "cache_salt"},
		{"route cache_salt empty", "/v1/route", `{"prompt": "hi", "cache_salt": ""}`, 400, typeInvalidRequest, codeInvalidType, "cache_salt"},
		{"unknown path", "/v2/nothing", `{}`, 404, typeNotFound, "not_found", ""},
		{"wrong method", "/v1/models", `{}`, 405, typeInvalidRequest, "method_not_allowed", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := fl.do("POST", c.path, c.body)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("not an OpenAI error body: %s", body)
			}
			code := ""
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if e.Error.Type != c.typ || code != c.code {
				t.Fatalf("type %q code %q, want %q %q", e.Error.Type, code, c.typ, c.code)
			}
			if c.param != "" && (e.Error.Param == nil || *e.Error.Param != c.param) {
				t.Fatalf("param %v, want %q: %s", e.Error.Param, c.param, body)
			}
			// The message is for a client: no sentinel's text appended.
			for _, suffix := range []string{ErrBadRequest.Error(), ErrUnknownModel.Error(), ErrPromptTooLong.Error(), errSyntax.Error()} {
				if strings.HasSuffix(e.Error.Message, ": "+suffix) {
					t.Fatalf("message %q ends with an internal suffix", e.Error.Message)
				}
			}
		})
	}
	if fl.activeRequests() != 0 || fl.metric("kvrouter_frontend_lifecycle_calls_total") != 0 {
		t.Fatal("refused requests reached the router")
	}
}

// The byte bound refuses a huge prompt without tokenizing it: a text of n
// bytes has at least n / longest-token-bytes tokens.
func TestPromptBoundBeforeTokenizing(t *testing.T) {
	counting := &countingTokenizer{Tokenizer: testTokenizer(t)}
	p := promptParser{model: "m", tok: counting, maxTokens: 100, maxTokenBytes: longestToken(testTokenizer(t))}
	if p.maxTokenBytes < 16 || p.maxTokenBytes > 1024 {
		t.Fatalf("longest token %d bytes", p.maxTokenBytes)
	}
	big := strings.Repeat("a", 101*p.maxTokenBytes)
	if _, err := p.encode(big, true); err == nil || counting.calls != 0 {
		t.Fatalf("err %v after %d encodes, want a refusal without encoding", err, counting.calls)
	}
	// Just within the byte bound: tokenized, then counted.
	if _, err := p.encode(strings.Repeat("a", 100*p.maxTokenBytes), true); err == nil || counting.calls != 1 {
		t.Fatalf("err %v after %d encodes", err, counting.calls)
	}
}

type countingTokenizer struct {
	Tokenizer
	calls int
}

func (c *countingTokenizer) Encode(s string, special bool) []uint32 {
	c.calls++
	return c.Tokenizer.Encode(s, special)
}

func TestAllBusyGives503(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 5, rcfg: func(c *router.Config) {
		c.Scheduler.ActiveDecodeBlocksThreshold = 0.001 // 2 of 2048 blocks
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": words(3, 100), "max_tokens": 2000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", fl.front.URL+"/v1/completions", strings.NewReader(string(b)))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	r2, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1})
	if r2.StatusCode != 503 || r2.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), codeOverloaded) {
		t.Fatalf("status %d retry-after %q: %s", r2.StatusCode, r2.Header.Get("Retry-After"), body)
	}
	// /v1/route explains the refusal.
	r3, body := fl.do("POST", "/v1/route", map[string]any{"prompt": "hi"})
	if r3.StatusCode != 503 || !strings.Contains(string(body), "busy: active decode blocks over threshold") {
		t.Fatalf("route: status %d: %s", r3.StatusCode, body)
	}
	cancel()
	resp.Body.Close()
	fl.waitIdle()
}

func TestAuth(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.APIKeys = []string{"user-key"}
		c.AdminKeys = []string{"admin-key"}
	}})
	completion := `{"prompt": "hi", "max_tokens": 1}`
	cases := []struct {
		method, path, body, key string
		status                  int
	}{
		{"POST", "/v1/completions", completion, "", 401},
		{"POST", "/v1/completions", completion, "wrong", 401},
		{"POST", "/v1/completions", completion, "user-key", 200},
		{"POST", "/v1/completions", completion, "admin-key", 200},
		{"GET", "/v1/models", "", "", 401},
		{"GET", "/v1/models", "", "user-key", 200},
		{"POST", "/v1/route", `{"prompt":"hi"}`, "user-key", 403},
		{"POST", "/v1/route", `{"prompt":"hi"}`, "admin-key", 200},
		{"POST", "/v1/query", `{"prompt":"hi"}`, "", 401},
		{"POST", "/v1/query", `{"prompt":"hi"}`, "admin-key", 200},
		{"GET", "/v1/workers", "", "user-key", 403},
		{"GET", "/v1/workers", "", "admin-key", 200},
		{"GET", "/metrics", "", "", 401},
		{"GET", "/metrics", "", "admin-key", 200},
		{"GET", "/", "", "", 401},
		{"GET", "/?key=admin-key", "", "", 200},
		{"GET", "/health", "", "", 200},
		{"GET", "/ready", "", "", 200},
	}
	for _, c := range cases {
		var hdr []string
		if c.key != "" {
			hdr = []string{"Authorization", "Bearer " + c.key}
		}
		var body any
		if c.body != "" {
			body = c.body
		}
		resp, b := fl.do(c.method, c.path, body, hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s key %q: status %d, want %d: %s", c.method, c.path, c.key, resp.StatusCode, c.status, b)
		}
		if resp.StatusCode == 401 && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s %s: 401 without WWW-Authenticate", c.method, c.path)
		}
	}
	fl.waitIdle()
}

// With API keys but no admin keys, admin endpoints take the API keys:
// setting keys never leaves the admin surface open.
func TestAuthAdminFallsBackToAPIKeys(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.APIKeys = []string{"k"} }})
	if resp, _ := fl.do("GET", "/v1/workers", nil); resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp, _ := fl.do("GET", "/v1/workers", nil, "Authorization", "Bearer k"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"model":       func(c *Config) { c.Model = "" },
		"body":        func(c *Config) { c.MaxBodyBytes = 0 },
		"tokens":      func(c *Config) { c.MaxPromptTokens = -1 },
		"retries":     func(c *Config) { c.MaxRetries = 17 },
		"dial":        func(c *Config) { c.DialTimeout = 0 },
		"header":      func(c *Config) { c.ResponseHeaderTimeout = -1 },
		"idle":        func(c *Config) { c.MaxIdleConnsPerWorker = -1 },
		"retry-after": func(c *Config) { c.RetryAfter = 0 },
		"recent":      func(c *Config) { c.RecentDecisions = -1 },
		"refresh":     func(c *Config) { c.StatusRefresh = 0 },
		"capture":     func(c *Config) { c.UsageCaptureBytes = -1 },
		"shutdown":    func(c *Config) { c.ShutdownTimeout = 0 },
		"read header": func(c *Config) { c.ReadHeaderTimeout = 0 },
		"alias":       func(c *Config) { c.Aliases = []string{""} },
		"api key":     func(c *Config) { c.APIKeys = []string{""} },
		"admin key":   func(c *Config) { c.AdminKeys = []string{"a", ""} },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
	if _, err := New(DefaultConfig(), Deps{}); !errors.Is(err, ErrDeps) {
		t.Fatalf("no deps: %v", err)
	}
}

func FuzzCompletionPrompt(f *testing.F) {
	for _, s := range []string{`"hi"`, `[1,2,3]`, `["a","b"]`, `[[1,2],[3]]`, `[]`, `null`, `[[[1]]]`, `[-1]`, `[1e40]`, `["x",1]`, `{"a":1}`, `"\ud800"`} {
		f.Add(s)
	}
	tok := testTokenizer(f)
	p := promptParser{model: "m", tok: tok, maxTokens: 64, maxTokenBytes: longestToken(tok)}
	f.Fuzz(func(t *testing.T, raw string) {
		pr, err := p.completionPrompt([]byte(raw))
		if err == nil && (len(pr.tokens) > 64 || pr.batch < 1) {
			t.Fatalf("accepted %d tokens, batch %d", len(pr.tokens), pr.batch)
		}
	})
}

func FuzzNativeRequest(f *testing.F) {
	for _, s := range []string{`{"tokens":[1,2]}`, `{"prompt":"x"}`, `{"messages":[{"role":"user","content":"x"}]}`, `{"block_hashes":[1]}`, `{}`, `[`, `{"tokens":[1],"prompt":"x"}`} {
		f.Add(s)
	}
	fl := newFleet(f, fleetOpt{workers: 0})
	f.Fuzz(func(t *testing.T, raw string) {
		_, _, _ = fl.f.nativeTokens([]byte(raw), true)
	})
}

// Error text is written as it reads: "<key>" is not escaped to
// "\u003ckey\u003e" (encoding/json's HTML escaping).
func TestErrorTextUnescaped(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.APIKeys = []string{"k"} }})
	resp, body := fl.do("GET", "/v1/models", nil)
	if resp.StatusCode != 401 || !strings.Contains(string(body), "Bearer <key>") || strings.Contains(string(body), `\u003c`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// A client's error — a worker's 4xx to a request the router could not
// judge — is not a failure on the status page; a worker's 5xx is.
func TestClientErrorsAreNotFailures(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.MaxRetries = 0 }})
	failed := func() (int64, int64) {
		fl.f.mu.Lock()
		defer fl.f.mu.Unlock()
		return fl.f.totals.Requests, fl.f.totals.Failed
	}
	// The mock holds 2048 blocks of 16 tokens: 100000 output tokens
	// cannot fit, the router's own cap (131072) lets it through.
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 100000})
	if resp.StatusCode != 400 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// In the router's error shape (a string code, an OpenAI type), not
	// the worker's (code 400, type BadRequestError).
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != typeInvalidRequest ||
		e.Error.Code == nil || *e.Error.Code != codeContextLength || !strings.Contains(e.Error.Message, "maximum context length") {
		t.Fatalf("worker's 400 relayed as %s (%v)", body, err)
	}
	if resp.Header.Get(HeaderWorker) != "w1" {
		t.Fatalf("no %s header on a worker's 400", HeaderWorker)
	}
	if n, f := failed(); n != 1 || f != 0 {
		t.Fatalf("after a worker's 400: %d requests, %d failed; want 1, 0", n, f)
	}
	fl.mocks[0].stop()
	if resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}); resp.StatusCode != 502 {
		t.Fatalf("dead worker: status %d: %s", resp.StatusCode, body)
	}
	if n, f := failed(); n != 2 || f != 1 {
		t.Fatalf("after a 502: %d requests, %d failed; want 2, 1", n, f)
	}
}

// A prompt far over MaxPromptTokens that the byte bound cannot refuse (one
// 4 MiB word: at least 16,384 tokens by bytes, the limit is 20,000) is
// refused without tokenizing it in full: the tokenizer stops at the limit
// and judges a huge word by its least token count. Tokenizing it in full
// allocates 40 bytes of BPE working memory per byte (160 MB).
func TestHugeWordRefusedWithoutFullTokenizing(t *testing.T) {
	tok := testTokenizer(t)
	p := promptParser{model: "m", tok: tok, maxTokens: 20000, maxTokenBytes: longestToken(tok)}
	big := strings.Repeat("abcdefghijklmnopqrstuvwxyz", (4<<20)/26)
	if err := p.checkTextBound(len(big)); err != nil {
		t.Fatalf("the byte bound alone refuses it (%v): the test needs a prompt it cannot judge", err)
	}
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	_, err := p.encode(big, true)
	runtime.ReadMemStats(&b)
	if !errors.Is(err, ErrPromptTooLong) {
		t.Fatalf("err %v, want ErrPromptTooLong", err)
	}
	if n := b.TotalAlloc - a.TotalAlloc; n > 1<<20 {
		t.Fatalf("refusing it allocated %d bytes: it was tokenized in full", n)
	}
}

// While every tokenization slot is taken, a large prompt waits at most
// TokenizeQueueTimeout and gets 503 tokenizer_busy with Retry-After; small
// prompts are never queued; once a slot is free the large one is served.
func TestLargePromptsQueueForTokenizing(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.TokenizeConcurrency = 1
		c.TokenizeQueueTimeout = 100 * time.Millisecond
	}})
	large := map[string]any{"prompt": strings.Repeat("lorem ipsum dolor sit amet ", (largePrompt/27)+1), "max_tokens": 1}
	release, err := fl.f.slots.acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	resp, body := fl.do("POST", "/v1/completions", large)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), codeTokenizerBusy) {
		t.Fatalf("large prompt with no slot free: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, body := fl.do("POST", "/v1/route", map[string]any{"prompt": large["prompt"]}); resp.StatusCode != 503 {
		t.Fatalf("large /v1/route with no slot free: %d %s", resp.StatusCode, body)
	}
	if resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "small", "max_tokens": 1}); resp.StatusCode != 200 {
		t.Fatalf("small prompt while the slot is taken: %d %s", resp.StatusCode, body)
	}
	if got := fl.metric("kvrouter_frontend_tokenize_queue_refused_total"); got != 2 {
		t.Fatalf("refused counter %v, want 2", got)
	}
	release()
	if resp, body := fl.do("POST", "/v1/completions", large); resp.StatusCode != 200 {
		t.Fatalf("large prompt with the slot free: %d %s", resp.StatusCode, body)
	}
	fl.waitIdle()
}

// Any body through the whole front door — validation, tokenizing, routing,
// booking, a real mock worker and back — gets a well-formed answer: 2xx, a
// 4xx in the router's error shape, never a 5xx; and the booking is freed.
func FuzzFrontDoorBodies(f *testing.F) {
	for _, s := range []string{`{"prompt":"hi","max_tokens":9223372036854775807}`, `{"prompt":"hi","max_tokens":2}`,
		`{"prompt":[1,2,3],"max_tokens":1,"stream":true}`, `{"prompt":["a","b"],"n":2}`, `{"prompt":"x","max_tokens":100000}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3}`, `{"messages":"x"}`, `{"prompt":"<|im_start|>"}`,
		`{"prompt":"x","stream":true,"stream_options":{"include_usage":true},"max_tokens":3}`, `{"model":5}`, `[`} {
		f.Add(false, s)
		f.Add(true, s)
	}
	fl := newFleet(f, fleetOpt{workers: 1, cfg: func(c *Config) { c.MaxPromptTokens = 4096 }})
	f.Fuzz(func(t *testing.T, chat bool, body string) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fl.front.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := fl.client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return // a long generation: the wait per input ran out
			}
			t.Fatalf("%s %q: %v", path, body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ctx.Err() != nil {
			return
		}
		if resp.StatusCode >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, resp.StatusCode, b)
		}
		if resp.StatusCode >= 400 {
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%s %q: %d not in the router's error shape: %s", path, body, resp.StatusCode, b)
			}
		}
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			n := fl.activeRequests()
			return n == 0, fmt.Sprintf("%d requests booked", n)
		}, fmt.Sprintf("%s %q: no request booked", path, body))
	})
}
