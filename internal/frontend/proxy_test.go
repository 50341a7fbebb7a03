package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

func TestCompletionNonStreaming(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"model": testModel, "prompt": words(1, 50), "max_tokens": 5})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if w := resp.Header.Get(HeaderWorker); w != "w1" && w != "w2" {
		t.Fatalf("worker header %q", w)
	}
	if resp.Header.Get(HeaderOverlapBlocks) != "0" {
		t.Fatalf("overlap header %q on a cold fleet", resp.Header.Get(HeaderOverlapBlocks))
	}
	var u usageBody
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	want := len(testTokenizer(t).Encode(words(1, 50), true))
	if u.Usage.PromptTokens != want || u.Usage.CompletionTokens != 5 {
		t.Fatalf("usage %+v, want %d prompt tokens and 5 completion tokens", u.Usage, want)
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_time_to_first_token_seconds"); got != 1 {
		t.Fatalf("ttft samples %v, want 1", got)
	}
	if got := fl.metric("kvrouter_frontend_lifecycle_calls_total", "op", "free", "result", "ok"); got != 1 {
		t.Fatalf("free calls %v, want 1", got)
	}
	// The request counter moves when the handler returns, which may trail
	// the booking's Free: wait for it, then check it counted exactly one.
	poll.Until(t, 5*time.Second, func() bool {
		return fl.metric("kvrouter_frontend_requests_total", "route", "completions", "status", "200") >= 1
	}, "the completion counted")
	if got := fl.metric("kvrouter_frontend_requests_total", "route", "completions", "status", "200"); got != 1 {
		t.Fatalf("requests_total %v", got)
	}
}

func TestCompletionStreamingAndChat(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	cases := []struct {
		name, path string
		body       map[string]any
	}{
		{"completion stream", "/v1/completions", map[string]any{"prompt": words(2, 40), "max_tokens": 6, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}},
		{"completion token ids stream", "/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, "max_tokens": 6, "stream": true}},
		{"chat", "/v1/chat/completions", map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": words(3, 30)}}, "max_tokens": 4}},
		{"chat stream", "/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": words(4, 30)}},
			"max_tokens": 6, "stream": true, "stream_options": map[string]any{"include_usage": true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := fl.do("POST", c.path, c.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			stream, _ := c.body["stream"].(bool)
			if !stream {
				if !strings.Contains(string(body), `"choices"`) {
					t.Fatalf("body %s", body)
				}
				return
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("content type %q", ct)
			}
			ev := sseEvents(body)
			if len(ev) < 7 || ev[len(ev)-1] != "[DONE]" {
				t.Fatalf("events %q", ev)
			}
		})
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_lifecycle_calls_total", "op", "mark_prefill_completed", "result", "ok"); got != 4 {
		t.Fatalf("mark prefill calls %v, want 4", got)
	}
	if got := fl.metric("kvrouter_frontend_inter_token_latency_seconds"); got < 3*5 {
		t.Fatalf("itl samples %v, want at least 15", got)
	}
}

// The chat prompt the router renders must be the one the worker computes:
// the worker's reported prompt tokens equal the router's count.
func TestChatPromptMatchesWorker(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1})
	msgs := []map[string]string{{"role": "user", "content": "hello there"}}
	_, body := fl.do("POST", "/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1})
	var u usageBody
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	resp, rb := fl.do("POST", "/v1/route", map[string]any{"messages": msgs})
	var d decisionJSON
	if err := json.Unmarshal(rb, &d); err != nil || resp.StatusCode != 200 {
		t.Fatalf("route %d %s", resp.StatusCode, rb)
	}
	if d.InputTokens != u.Usage.PromptTokens || d.InputTokens == 0 {
		t.Fatalf("router counts %d prompt tokens, worker %d", d.InputTokens, u.Usage.PromptTokens)
	}
}

func TestRepeatedPromptLandsOnCachedWorker(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 3})
	prompt := words(9, 400) // ~800 tokens, 50 blocks
	first, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2})
	if first.StatusCode != 200 {
		t.Fatalf("status %d: %s", first.StatusCode, body)
	}
	fl.waitIdle()
	worker := first.Header.Get(HeaderWorker)
	promptTokens := 0
	for i := range 3 {
		resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2})
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if got := resp.Header.Get(HeaderWorker); got != worker {
			t.Fatalf("repeat %d went to %s, the cache is on %s", i, got, worker)
		}
		overlap, _ := strconv.Atoi(resp.Header.Get(HeaderOverlapBlocks))
		var u usageBody
		if err := json.Unmarshal(body, &u); err != nil {
			t.Fatal(err)
		}
		promptTokens = u.Usage.PromptTokens
		full := u.Usage.PromptTokens / 16
		if overlap != full {
			t.Fatalf("predicted overlap %d blocks, the prompt has %d full blocks", overlap, full)
		}
		if c := u.Usage.PromptTokensDetails.CachedTokens; c < (full-1)*16 {
			t.Fatalf("worker reports %d cached tokens, want about %d", c, full*16)
		}
		fl.waitIdle()
	}
	// The accuracy metrics are written after the booking is freed (and
	// after the client has its answer), the prompt-token counter last:
	// wait for the fourth response's.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		got := fl.metric("kvrouter_frontend_usage_prompt_tokens_total", "worker", worker)
		return got >= 4*float64(promptTokens), fmt.Sprintf("%v prompt tokens counted for %s, want 4 × %d", got, worker, promptTokens)
	}, "four responses' accuracy metrics")
	if got := fl.metric("kvrouter_frontend_cached_tokens_error", "worker", worker); got != 4 {
		t.Fatalf("accuracy samples for %s: %v, want 4", worker, got)
	}
	pred := fl.metric("kvrouter_frontend_predicted_cached_tokens_total", "worker", worker)
	act := fl.metric("kvrouter_frontend_actual_cached_tokens_total", "worker", worker)
	if pred == 0 || act < pred-3*16 || act > pred {
		t.Fatalf("predicted %v vs actual %v cached tokens", pred, act)
	}
}

func TestClientDisconnectFreesBooking(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2, speedup: 5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": words(5, 60), "max_tokens": 2000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", fl.front.URL+"/v1/completions", strings.NewReader(string(b)))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	if fl.activeRequests() != 1 {
		t.Fatalf("router tracks %d requests mid-stream, want 1", fl.activeRequests())
	}
	cancel()
	resp.Body.Close()
	fl.waitIdle()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		fl.f.mu.Lock()
		recs := fl.f.recent.list()
		fl.f.mu.Unlock()
		return len(recs) == 1 && recs[0].Outcome == "client disconnected" && recs[0].Status == 499, fmt.Sprintf("records %+v", recs)
	}, "one client disconnect recorded")
}

func TestWorkerKilledRetriedElsewhere(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	prompt := words(11, 200)
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	fl.waitIdle()
	cached := resp.Header.Get(HeaderWorker)
	idx := int(cached[1] - '1')
	fl.mocks[idx].stop() // killed; the directory still lists it
	for i := range 4 {
		p := prompt
		if i > 0 {
			p = words(20+i, 100)
		}
		resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": p, "max_tokens": 2, "stream": i%2 == 1})
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
		if got := resp.Header.Get(HeaderWorker); got == cached {
			t.Fatalf("request %d served by the dead worker %s", i, got)
		}
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_retries_total", "reason", "connect"); got < 1 {
		t.Fatalf("connect retries %v, want at least 1 (the cached prompt prefers the dead worker)", got)
	}
	if unk := fl.metric("kvrouter_frontend_lifecycle_calls_total", "result", "unknown"); unk != 0 {
		t.Fatalf("%v lifecycle calls on unknown ids", unk)
	}
}

func TestAllWorkersDeadGives502(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	for _, m := range fl.mocks {
		m.stop()
	}
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 2})
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"type":"upstream_error"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	fl.waitIdle()
}

func TestWorker5xxRetriedThenPassedThrough(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.MaxRetries = 3 }})
	calls := 0
	bad := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		calls++
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(rw, `{"error":{"message":"boom","type":"InternalServerError","code":500}}`)
	})
	srv := newLoopbackServer(t, bad)
	// Worker 1's URL now points to a failing server: every attempt is a
	// 5xx; with one worker, the first attempt excludes it and the error
	// passes through.
	e, _ := fl.dir.Lookup(1)
	e.URL = srv
	fl.dir.set(e)
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hello", "max_tokens": 2})
	if resp.StatusCode != 500 || !strings.Contains(string(body), "boom") || calls != 1 {
		t.Fatalf("status %d, %d calls: %s", resp.StatusCode, calls, body)
	}
	fl.waitIdle()
}

// With ForwardTokenIDs the worker receives the router's token ids and
// the rest of the body unchanged; by default it receives the original
// bytes.
func TestForwardTokenIDs(t *testing.T) {
	for _, forward := range []bool{false, true} {
		got := make(chan []byte, 1)
		stub := newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- b
			rw.Header().Set("Content-Type", "application/json")
			fmt.Fprint(rw, `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`)
		}))
		fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.ForwardTokenIDs = forward }})
		e, _ := fl.dir.Lookup(1)
		e.URL = stub
		fl.dir.set(e)
		orig := `{"prompt":"hello world","max_tokens":3,"temperature":0.5}`
		resp, body := fl.do("POST", "/v1/completions", orig)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		sent := <-got
		if !forward {
			if string(sent) != orig {
				t.Fatalf("forwarded %s, want the original body", sent)
			}
			continue
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(sent, &m); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(testTokenizer(t).Encode("hello world", true))
		if string(m["prompt"]) != string(want) || string(m["max_tokens"]) != "3" || string(m["temperature"]) != "0.5" {
			t.Fatalf("forwarded %s", sent)
		}
		fl.waitIdle()
	}
}

// With output-block tracking on, the booking grows as tokens stream.
func TestSetGeneratedAsTokensStream(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 20, rcfg: func(c *router.Config) { c.Sequences.TrackOutputBlocks = true }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32}, "max_tokens": 400, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", fl.front.URL+"/v1/completions", strings.NewReader(string(b)))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	first := -1.0
	for events := 0; ; {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended after %d events without the booking growing (first %v, now %+v)", events, first, fl.r.Loads())
		}
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		events++
		blocks := fl.r.Loads()[0].ActiveBlocks
		if first < 0 {
			first = blocks
		}
		if events > 100 && blocks >= first+4 {
			break
		}
	}
	cancel()
	fl.waitIdle()
}

// With the workers' KV events applied (exact mode), the router's
// prediction is the engine's own cache: the repeat lands on the worker
// holding the prompt, and the reported cached tokens match the overlap.
func TestExactModeFollowsWorkerEvents(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 3, exact: true})
	prompt := words(13, 300)
	first, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2})
	if first.StatusCode != 200 {
		t.Fatalf("status %d: %s", first.StatusCode, body)
	}
	fl.waitIdle()
	var u usageBody
	if err := json.Unmarshal(body, &u); err != nil {
		t.Fatal(err)
	}
	full := u.Usage.PromptTokens / 16
	worker := first.Header.Get(HeaderWorker)
	// The stored events arrive after the engine step: poll /v1/query.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		_, qb := fl.do("POST", "/v1/query", map[string]any{"prompt": prompt})
		var q queryResponse
		if err := json.Unmarshal(qb, &q); err != nil {
			t.Fatal(err)
		}
		return q.Workers[0].Worker == worker && q.Workers[0].OverlapBlocks == full && q.Workers[0].State == "EXACT" && q.Workers[1].OverlapBlocks == 0, string(qb)
	}, fmt.Sprintf("the index to show %d blocks on %s", full, worker))
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != worker || resp.Header.Get(HeaderOverlapBlocks) != strconv.Itoa(full) {
		t.Fatalf("repeat: status %d worker %s overlap %s, want %s with %d", resp.StatusCode, resp.Header.Get(HeaderWorker),
			resp.Header.Get(HeaderOverlapBlocks), worker, full)
	}
	ev := sseEvents(body)
	if err := json.Unmarshal([]byte(ev[len(ev)-2]), &u); err != nil {
		t.Fatal(err)
	}
	if c := u.Usage.PromptTokensDetails.CachedTokens; c < (full-1)*16 || c > full*16 {
		t.Fatalf("worker reports %d cached tokens, router predicted %d", c, full*16)
	}
	fl.waitIdle()
	// Written after the booking is freed: wait for the second sample.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		got := fl.metric("kvrouter_frontend_cached_tokens_error", "worker", worker)
		return got >= 2, fmt.Sprintf("%v accuracy samples", got)
	}, "two accuracy samples")
	if got := fl.metric("kvrouter_frontend_cached_tokens_error", "worker", worker); got != 2 {
		t.Fatalf("accuracy samples %v, want 2", got)
	}
}

// A worker answering 5xx before its first byte is excluded and the
// request served by another worker.
func TestWorker5xxRetriedOnAnotherWorker(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	prompt := words(17, 200)
	resp, _ := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	fl.waitIdle()
	cached := resp.Header.Get(HeaderWorker)
	id := kvevent.WorkerID(cached[1] - '0')
	bad := newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		http.Error(rw, `{"error":{"message":"engine dead"}}`, http.StatusServiceUnavailable)
	}))
	e, _ := fl.dir.Lookup(id)
	e.URL = bad
	fl.dir.set(e)
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) == cached {
		t.Fatalf("status %d from %s (the failing worker is %s): %s", resp.StatusCode, resp.Header.Get(HeaderWorker), cached, body)
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_retries_total", "reason", "status_5xx"); got != 1 {
		t.Fatalf("5xx retries %v, want 1", got)
	}
	fl.dir.mu.Lock()
	defer fl.dir.mu.Unlock()
	if want := []string{fmt.Sprintf("%d:status_5xx", id)}; !slices.Equal(fl.dir.failures, want) {
		t.Fatalf("reported failures %q, want %q", fl.dir.failures, want)
	}
}

// A worker that breaks mid-stream: the client gets the events so far and
// an in-band error event; the booking is freed.
func TestWorkerFailsMidStream(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1})
	broken := newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		fmt.Fprint(rw, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n")
		rw.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drop the connection
	}))
	e, _ := fl.dir.Lookup(1)
	e.URL = broken
	fl.dir.set(e)
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 5, "stream": true})
	ev := sseEvents(body)
	if resp.StatusCode != 200 || len(ev) != 2 || !strings.Contains(ev[0], `"text":"a"`) || !strings.Contains(ev[1], `"type":"upstream_error"`) {
		t.Fatalf("status %d events %q", resp.StatusCode, ev)
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_lifecycle_calls_total", "op", "free", "result", "ok"); got != 1 {
		t.Fatalf("free calls %v", got)
	}
}

// TestNoWorkerWhileStartingSaysWhy: a router with no worker answers 503
// with Retry-After; while it is not ready (NATS start-up, registry not
// read yet) the message carries the readiness reason, so a client sent
// to it early sees why.
func TestNoWorkerWhileStartingSaysWhy(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 0})
	req := map[string]any{"prompt": "hello there", "max_tokens": 1}
	fl.readyMu.Lock()
	fl.ready = errors.New("NATS start-up: opening the worker registry")
	fl.readyMu.Unlock()
	resp, body := fl.do("POST", "/v1/completions", req)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "router not ready: NATS start-up: opening the worker registry") ||
		!strings.Contains(string(body), `"code":"no_worker_available"`) {
		t.Fatalf("while starting: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	fl.readyMu.Lock()
	fl.ready = nil
	fl.readyMu.Unlock()
	resp, body = fl.do("POST", "/v1/completions", req)
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "not ready") {
		t.Fatalf("ready, still no worker: %d %s", resp.StatusCode, body)
	}
}

// When no worker is eligible, the 503 says why, from the fleet's worker
// states (refused ones first), and points at /v1/workers.
func TestNoWorkerSaysWhy(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 0})
	req := map[string]any{"prompt": "hello there", "max_tokens": 1}
	resp, body := fl.do("POST", "/v1/completions", req)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "no eligible worker: no workers are known; see /v1/workers") {
		t.Fatalf("no workers: %d %s", resp.StatusCode, body)
	}
	now := time.Now()
	fl.dir.set(WorkerEntry{ID: 7, Name: "w7", URL: "http://127.0.0.1:1",
		Status: fleet.Status{State: fleet.StateDown, Reason: "health check: connection refused", Since: now}})
	fl.dir.set(WorkerEntry{ID: 8, Name: "w8", URL: "http://127.0.0.1:1",
		Status: fleet.Status{State: fleet.StateRefused, Reason: "block size mismatch: block size 64 ≠ 16", Since: now}})
	for _, path := range []string{"/v1/completions", "/v1/route"} {
		resp, body = fl.do("POST", path, req)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != http.StatusServiceUnavailable || e.Error.Code != codeNoWorker {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
		want := "no eligible worker: 1 worker refused: block size 64 ≠ 16; 1 worker down: health check: connection refused; see /v1/workers"
		if e.Error.Message != want {
			t.Fatalf("%s: message %q, want %q", path, e.Error.Message, want)
		}
	}
}
