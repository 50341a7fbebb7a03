package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closingIdle{m},
		// go-zeromq/zmq4 v0.17.0 parks one writer goroutine per closed PUB
		// socket (its Close never wakes it); see internal/eventplane/vllmzmq.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}

// closingIdle runs the tests, then closes http.DefaultClient's idle
// keep-alive connections before goleak looks: the tests talk to the
// workers through it, and a connection it keeps open to a worker keeps
// that worker's connection goroutine and the client's read and write
// loops alive after the tests (seen once in CI).
type closingIdle struct{ m *testing.M }

func (c closingIdle) Run() int {
	code := c.m.Run()
	http.DefaultClient.CloseIdleConnections()
	return code
}

func testConfig() Config {
	c := DefaultConfig()
	c.Model = "mock-model"
	c.Engine.BlockSize = 16
	c.Engine.NumGPUBlocks = 256
	c.Engine.SpeedupRatio = 1000
	c.Engine.HashSeed = 42
	c.Logger = slog.New(slog.DiscardHandler)
	return c
}

type running struct {
	w    *Worker
	url  string
	stop func() error
	errc chan error
}

func start(t *testing.T, c Config) *running {
	t.Helper()
	w, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Serve(ctx, ln) }()
	var once bool
	var serveErr error
	stop := func() error {
		if !once {
			once = true
			cancel()
			serveErr = <-errc
		}
		return serveErr
	}
	t.Cleanup(func() { _ = stop() })
	return &running{w: w, url: "http://" + ln.Addr().String(), stop: stop, errc: errc}
}

func post(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type completion struct {
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Object string `json:"object"`
}

func words(n int, salt string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "w%s%d ", salt, i)
	}
	return b.String()
}

func TestStreamedCompletion(t *testing.T) {
	r := start(t, testConfig())
	b, _ := json.Marshal(map[string]any{"model": "mock-model", "prompt": words(40, "s"), "max_tokens": 7,
		"stream": true, "stream_options": map[string]any{"include_usage": true}})
	resp, err := http.Post(r.url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var tokens, finished int
	var usageSeen, done bool
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatal(err)
		}
		if c.Object != "text_completion" {
			t.Fatalf("object %q", c.Object)
		}
		if c.Usage != nil {
			usageSeen = true
			if len(c.Choices) != 0 || c.Usage.PromptTokens != 40 || c.Usage.CompletionTokens != 7 || c.Usage.TotalTokens != 47 {
				t.Fatalf("usage chunk %s", data)
			}
			continue
		}
		tokens++
		if c.Choices[0].FinishReason != nil {
			finished++
			if *c.Choices[0].FinishReason != "length" || tokens != 7 {
				t.Fatalf("finish %q after %d tokens", *c.Choices[0].FinishReason, tokens)
			}
		}
	}
	if tokens != 7 || finished != 1 || !usageSeen || !done {
		t.Fatalf("tokens %d finished %d usage %v done %v", tokens, finished, usageSeen, done)
	}
}

func TestCachedTokensRiseOnRepeatedPrompt(t *testing.T) {
	r := start(t, testConfig())
	prompt := words(100, "c") // 6 full blocks of 16 + 4
	var cached []int
	for range 2 {
		code, body := post(t, r.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 3})
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		var c completion
		if err := json.Unmarshal(body, &c); err != nil {
			t.Fatal(err)
		}
		if len(c.Choices) != 1 || c.Choices[0].Text == "" || c.Usage.CompletionTokens != 3 {
			t.Fatalf("response %s", body)
		}
		cached = append(cached, c.Usage.PromptTokensDetails.CachedTokens)
	}
	if cached[0] != 0 || cached[1] != 96 {
		t.Fatalf("cached tokens %v, want [0 96]", cached)
	}
	// The local indexer saw the same blocks the engine holds.
	if n := r.w.LocalIndex(0).Len(kvevent.TierDevice); n == 0 {
		t.Fatal("local index empty")
	}
	// Metrics carry vLLM's names and the hit.
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`vllm:prefix_cache_hits_total{engine="0",model_name="Qwen/Qwen3-0.6B"} 96`,
		"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
		"vllm:inter_token_latency_seconds_bucket", "vllm:prefix_cache_queries_total",
		"\ngo_goroutines ", "\nprocess_cpu_seconds_total "} { // the worker's own registry has the runtime collectors
		if !strings.Contains(string(m), want) && !strings.Contains(string(m), strings.Replace(want, "Qwen/Qwen3-0.6B", "mock-model", 1)) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestChatBatchAndTokenIDs(t *testing.T) {
	r := start(t, testConfig())
	code, body := post(t, r.url+"/v1/chat/completions", map[string]any{"model": "mock-model", "max_tokens": 4,
		"messages": []any{map[string]any{"role": "user", "content": "hello there"}}})
	var c completion
	if err := json.Unmarshal(body, &c); code != 200 || err != nil || c.Object != "chat.completion" ||
		c.Choices[0].Message == nil || c.Choices[0].Message.Role != "assistant" || c.Usage.CompletionTokens != 4 {
		t.Fatalf("chat: %d %s", code, body)
	}
	code, body = post(t, r.url+"/v1/completions", map[string]any{"prompt": [][]int{{1, 2, 3}, {4, 5, 6, 7}}, "max_tokens": 2})
	c = completion{}
	if err := json.Unmarshal(body, &c); code != 200 || err != nil || len(c.Choices) != 2 || c.Usage.PromptTokens != 7 || c.Usage.CompletionTokens != 4 {
		t.Fatalf("batch: %d %s", code, body)
	}
	code, body = post(t, r.url+"/tokenize", map[string]any{"prompt": "a b c"})
	var tk struct {
		Count  int      `json:"count"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &tk); code != 200 || err != nil || tk.Count != 3 || len(tk.Tokens) != 3 {
		t.Fatalf("tokenize: %d %s", code, body)
	}
	// Text and the ids /tokenize returns are the same prompt to the cache.
	prompt := words(40, "t")
	_, body = post(t, r.url+"/tokenize", map[string]any{"prompt": prompt})
	_ = json.Unmarshal(body, &tk)
	post(t, r.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	_, body = post(t, r.url+"/v1/completions", map[string]any{"prompt": tk.Tokens, "max_tokens": 1})
	c = completion{}
	if err := json.Unmarshal(body, &c); err != nil || c.Usage.PromptTokensDetails.CachedTokens != 32 {
		t.Fatalf("token-id prompt after text prompt: %s", body)
	}
	resp, err := http.Get(r.url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(mb), `"id":"mock-model"`) {
		t.Fatalf("models: %s", mb)
	}
}

func TestBadRequests(t *testing.T) {
	r := start(t, testConfig())
	for _, c := range []struct {
		path string
		body any
		code int
		msg  string
	}{
		{"/v1/completions", map[string]any{"model": "other", "prompt": "x"}, 404, "does not exist"},
		{"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 0}, 400, "max_tokens"},
		{"/v1/completions", map[string]any{"max_tokens": 3}, 400, "prompt"},
		{"/v1/completions", map[string]any{"prompt": ""}, 400, "empty"},
		{"/v1/completions", map[string]any{"prompt": []int{-1}}, 400, "vocabulary"},
		{"/v1/completions", map[string]any{"prompt": 12}, 400, "prompt must be"},
		{"/v1/completions", map[string]any{"prompt": words(10, "x"), "max_tokens": 5000}, 400, "maximum context length"},
		{"/v1/completions", map[string]any{"prompt": "x", "data_parallel_rank": 3}, 400, "out of range"},
		{"/v1/chat/completions", map[string]any{"messages": []any{}}, 400, "messages"},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, 400, "not supported"},
	} {
		code, body := post(t, r.url+c.path, c.body)
		var e apiError
		if err := json.Unmarshal(body, &e); err != nil || code != c.code || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.msg) {
			t.Errorf("%s %v: %d %s; want %d with %q", c.path, c.body, code, body, c.code, c.msg)
		}
	}
	resp, err := http.Post(r.url+"/v1/completions", "application/json", strings.NewReader("{"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad JSON: %d", resp.StatusCode)
	}
}

func TestDataParallelRanksAndReset(t *testing.T) {
	c := testConfig()
	c.DataParallelSize = 2
	r := start(t, c)
	prompt := words(40, "dp")
	for rank := range 2 {
		b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
		req, _ := http.NewRequest("POST", r.url+"/v1/completions", bytes.NewReader(b))
		req.Header.Set("X-Data-Parallel-Rank", fmt.Sprint(rank))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n := r.w.LocalIndex(rank).Len(kvevent.TierDevice); n != 2 {
			t.Fatalf("rank %d holds %d blocks, want 2", rank, n)
		}
	}
	if code, body := post(t, r.url+"/reset_prefix_cache", nil); code != 200 {
		t.Fatalf("reset: %d %s", code, body)
	}
	for rank := range 2 {
		if n := r.w.LocalIndex(rank).Len(kvevent.TierDevice); n != 0 {
			t.Fatalf("rank %d holds %d blocks after reset", rank, n)
		}
	}
}

func TestCrashAfterN(t *testing.T) {
	c := testConfig()
	c.Faults.CrashAfter = 2
	r := start(t, c)
	for range 2 {
		post(t, r.url+"/v1/completions", map[string]any{"prompt": "a b", "max_tokens": 1})
	}
	select {
	case err := <-r.errc:
		if !errors.Is(err, ErrCrashed) {
			t.Fatalf("Serve returned %v, want ErrCrashed", err)
		}
		r.errc <- err // for the cleanup's stop
	case <-time.After(10 * time.Second):
		t.Fatal("worker did not crash")
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	c := testConfig()
	c.Engine.SpeedupRatio = 1 // slow: the request is still running at shutdown
	r := start(t, c)
	errc := make(chan error, 1)
	go func() {
		b, _ := json.Marshal(map[string]any{"prompt": "a b c", "max_tokens": 4000, "stream": true})
		resp, err := http.Post(r.url+"/v1/completions", "application/json", bytes.NewReader(b))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	poll.Until(t, 5*time.Second, func() bool { return r.w.ranks[0].inflight.Load() != 0 }, "the request to start")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	<-errc
}

// A client that goes away mid-stream frees its request on the engine.
func TestClientCancelAborts(t *testing.T) {
	c := testConfig()
	c.Engine.SpeedupRatio = 1
	r := start(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"prompt": "a b c", "max_tokens": 4000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/v1/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Read the first token, then hang up.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	cancel()
	resp.Body.Close()
	poll.Until(t, 10*time.Second, func() bool { return r.w.ranks[0].inflight.Load() == 0 }, "no request in flight after the client left")
}

// A max_tokens whose sum with the prompt length overflows an int is a 400,
// and the engine keeps serving (it used to panic in the rank goroutine,
// taking the whole process down).
func TestOverflowingMaxTokensRefused(t *testing.T) {
	r := start(t, testConfig())
	for _, body := range []string{`{"prompt":"hi","max_tokens":9223372036854775807}`,
		`{"prompt":"hi","max_tokens":9223372036854775806}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9223372036854775807}`} {
		path := "/v1/completions"
		if strings.Contains(body, "messages") {
			path = "/v1/chat/completions"
		}
		resp, err := http.Post(r.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "maximum context length") {
			t.Fatalf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	if code, body := post(t, r.url+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 2}); code != 200 {
		t.Fatalf("after the refusals: %d %s", code, body)
	}
}

// A prompt longer than the context is refused without tokenizing it in
// full: a 4 MiB one-word prompt would cost BPE 40 bytes of working memory
// per byte (160 MB); the refusal allocates what reading the body does.
func TestHugePromptRefusedWithoutFullTokenizing(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	c := testConfig()
	c.Tokenizer = tok
	r := start(t, c)
	body, _ := json.Marshal(map[string]any{"prompt": strings.Repeat("abcdefghijklmnopqrstuvwxyz", (4<<20)/26), "max_tokens": 1})
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	resp, err := http.Post(r.url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&b)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "maximum context length") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if n := b.TotalAlloc - a.TotalAlloc; n > 64<<20 {
		t.Fatalf("refusing it allocated %d bytes: it was tokenized in full", n)
	}
}
