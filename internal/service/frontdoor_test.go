package service

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
)

const model = "Qwen/Qwen3-0.6B"

type usageBody struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

func longText() string {
	var b strings.Builder
	for i := range 120 {
		b.WriteString("The router keeps a prefix index of every worker's KV cache, entry ")
		b.WriteString(strconv.Itoa(i))
		b.WriteString(". ")
	}
	return b.String()
}

// TestFrontDoor is `kvrouter up` on random ports: the OpenAI API through
// the router to mock workers fed by ZMQ events, with the embedded Qwen3
// tokenizer on both sides.
func TestFrontDoor(t *testing.T) {
	r := newRig(t, rigOpt{workers: 3, cfg: func(c *config.Config) { c.Events.HealthInterval = 0 }})
	chat := func(content string, stream bool) map[string]any {
		b := map[string]any{"model": model, "max_tokens": 4,
			"messages": []map[string]any{{"role": "user", "content": content}}}
		if stream {
			b["stream"] = true
			b["stream_options"] = map[string]any{"include_usage": true}
		}
		return b
	}

	t.Run("chat and completion, streamed and not", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			body map[string]any
		}{
			{"/v1/chat/completions", chat("Hello there", false)},
			{"/v1/chat/completions", chat("Hello there", true)},
			{"/v1/completions", map[string]any{"model": model, "prompt": "Once upon a time", "max_tokens": 4}},
			{"/v1/completions", map[string]any{"model": model, "prompt": "Once upon a time", "max_tokens": 4, "stream": true}},
		} {
			resp, body := r.post(tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s %v: %d %s", tc.path, tc.body["stream"], resp.StatusCode, body)
			}
			if resp.Header.Get("X-Kvrouter-Worker") == "" {
				t.Errorf("%s: no X-Kvrouter-Worker header", tc.path)
			}
			if tc.body["stream"] == true {
				if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
					!strings.Contains(body, "data: ") || !strings.Contains(body, "data: [DONE]") {
					t.Errorf("%s stream: %q", tc.path, body)
				}
				continue
			}
			var u usageBody
			if err := json.Unmarshal([]byte(body), &u); err != nil || len(u.Choices) != 1 || u.Usage.CompletionTokens != 4 {
				t.Errorf("%s: %q (%v)", tc.path, body, err)
			}
		}
	})

	text := longText()
	var first string
	t.Run("repeated long prompt lands on the worker that cached it", func(t *testing.T) {
		resp, body := r.post("/v1/chat/completions", chat(text, false))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		first = resp.Header.Get("X-Kvrouter-Worker")
		var u usageBody
		if err := json.Unmarshal([]byte(body), &u); err != nil {
			t.Fatal(err)
		}
		if u.Usage.PromptTokens < 20*blockSize {
			t.Fatalf("prompt has only %d tokens", u.Usage.PromptTokens)
		}
		// Wait until the worker's stored event reached the index.
		poll.UntilState(r.t, 5*time.Second, func() (bool, string) {
			resp, body := r.post("/v1/route", chat(text, false))
			return resp.StatusCode == http.StatusOK && strings.Contains(body, `"overlap_blocks":`+strconv.Itoa(u.Usage.PromptTokens/blockSize)), body
		}, "prompt indexed")
		for range 3 {
			resp, body = r.post("/v1/chat/completions", chat(text, false))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if w := resp.Header.Get("X-Kvrouter-Worker"); w != first {
				t.Fatalf("repeat went to %s, the prompt is cached on %s", w, first)
			}
			var u2 usageBody
			if err := json.Unmarshal([]byte(body), &u2); err != nil {
				t.Fatal(err)
			}
			predicted, _ := strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
			// The engine recomputes at least the prompt's last token, so a
			// prompt of whole blocks gets one block less from the cache.
			want := min(predicted*blockSize, (u2.Usage.PromptTokens-1)/blockSize*blockSize)
			if u2.Usage.PromptTokensDetails.CachedTokens == 0 || u2.Usage.PromptTokensDetails.CachedTokens != want {
				t.Fatalf("worker reports %d cached tokens; router predicted %d blocks (%d tokens expected) of %d prompt tokens",
					u2.Usage.PromptTokensDetails.CachedTokens, predicted, want, u2.Usage.PromptTokens)
			}
		}
	})

	t.Run("killed worker: retried elsewhere, no booking leaked", func(t *testing.T) {
		var victim *FleetWorker
		for _, w := range r.fleet.Workers {
			if w.Name == first {
				victim = w
			}
		}
		if victim == nil {
			t.Fatalf("no worker %q", first)
		}
		if err := victim.Stop(); err != nil {
			t.Fatal(err)
		}
		before := r.metric("kvrouter_frontend_retries_total")
		resp, body := r.post("/v1/chat/completions", chat(text, false))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if w := resp.Header.Get("X-Kvrouter-Worker"); w == victim.Name || w == "" {
			t.Fatalf("served by %q", w)
		}
		if r.metric("kvrouter_frontend_retries_total") <= before {
			t.Fatal("no retry was counted: the killed worker was not chosen first")
		}
		poll.UntilState(r.t, 5*time.Second, r.noBookings, "no booking leaked")
	})
}

// TestDeadWorkerMarkedDown: a worker whose /health stops answering is
// marked DOWN with the reason and no longer routed to.
func TestDeadWorkerMarkedDown(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2})
	victim := r.fleet.Workers[0]
	if err := victim.Stop(); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(r.t, 5*time.Second, func() (bool, string) {
		st := r.workers()[victim.Name]
		return st[0] == "DOWN" && strings.Contains(st[1], "health check failed"), st[0] + " " + st[1]
	}, "worker DOWN")
	if n := r.metric("kvrouter_worker_state", "worker", victim.Name, "state", "DOWN"); n != 1 {
		t.Fatalf("kvrouter_worker_state{DOWN} = %v", n)
	}
	before := r.metric("kvrouter_frontend_retries_total")
	for _, p := range prompts(6, 4) {
		if w := r.complete(p, 2); w != r.fleet.Workers[1].Name {
			t.Fatalf("served by %q", w)
		}
	}
	if r.metric("kvrouter_frontend_retries_total") != before {
		t.Fatal("a DOWN worker was still chosen")
	}
}

// TestReadyWaitsForReplay: /ready is 503 while a worker's event endpoint
// cannot be reached, naming the worker, and turns 200 once the wait is
// given up (--ready-timeout, on the service's clock).
func TestReadyWaitsForReplay(t *testing.T) {
	cfg := config.Default()
	cfg.EventPlane.Kind = config.PlaneNone
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.Events.ReadyTimeout = time.Minute
	cfg.Events.HealthInterval = 0
	cfg.Events.DialRetry = 10 * time.Millisecond
	// Port 1 on loopback: nothing listens, dials are refused forever.
	cfg.Workers = append(cfg.Workers, zmqWorker)
	cfg.Workers[0].Events = "tcp://127.0.0.1:1"
	var now atomic.Int64
	now.Store(time.Unix(1e9, 0).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	svc, err := New(cfg, Options{Logger: discardLog(), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Ready(); err == nil {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ln := listen(t)
	go func() { done <- svc.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String() + "/ready"
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	code := func() int {
		resp, err := client.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	poll.Until(t, 10*time.Second, func() bool { return svc.Addr() != nil && code() != 0 }, "the router serving")
	if c := code(); c != http.StatusServiceUnavailable {
		t.Fatalf("/ready %d while the replay is pending (Ready: %v)", c, svc.Ready())
	}
	if err := svc.Ready(); err == nil || !strings.Contains(err.Error(), "w1") {
		t.Fatalf("Ready() = %v, want the pending worker named", err)
	}
	now.Add(int64(59 * time.Second))
	if c := code(); c != http.StatusServiceUnavailable {
		t.Fatalf("/ready %d before the ready timeout", c)
	}
	now.Add(int64(time.Second))
	if c := code(); c != http.StatusOK {
		t.Fatalf("/ready %d after the ready timeout", c)
	}
}

// /metrics carries the Go runtime and process collectors next to
// kvrouter's own metrics, on the injected registry.
func TestMetricsHaveRuntimeCollectors(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1})
	code, body := r.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	want := []string{"\ngo_goroutines ", "\ngo_memstats_heap_alloc_bytes ", "\nkvrouter_worker_state{"}
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" || runtime.GOOS == "windows" {
		want = append(want, "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ")
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics has no %q", strings.TrimSpace(w))
		}
	}
}

// The probe end to end: a max_tokens of 2^63-1 is the router's own
// 400 (it never reaches a worker), and the process keeps serving.
func TestAbsurdMaxTokensRefusedBeforeRouting(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := map[string]any{"model": model, "max_tokens": int64(9223372036854775807)}
		if path == "/v1/completions" {
			body["prompt"] = "hi"
		} else {
			body["messages"] = []map[string]any{{"role": "user", "content": "hi"}}
		}
		resp, b := r.post(path, body)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Kvrouter-Worker") != "" ||
			!strings.Contains(b, `"param":"max_tokens"`) || !strings.Contains(b, `"code":"integer_above_max_value"`) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if resp, b := r.post("/v1/completions", map[string]any{"model": model, "prompt": "hi", "max_tokens": 2}); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the refusals: %d %s", resp.StatusCode, b)
	}
}
