package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// Disaggregated serving end to end: the router as the PD proxy in front
// of mock prefill and decode workers over real HTTP (docs/pd.md).

func pdBody(prompt string, maxTokens int, stream bool) map[string]any {
	b := map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens}
	if stream {
		b["stream"] = true
		b["stream_options"] = map[string]any{"include_usage": true}
	}
	return b
}

// pdAnswer checks a 200 answer with maxTokens tokens, streamed or whole,
// and returns its prefill and decode worker headers.
func pdAnswer(t *testing.T, resp *http.Response, body string, maxTokens int, stream bool) (prefill, decode string) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if stream {
		if !strings.Contains(body, "data: [DONE]") {
			t.Fatalf("stream without [DONE]: %s", body)
		}
		n := strings.Count(body, `"finish_reason":null`) + strings.Count(body, `"finish_reason":"length"`)
		if n != maxTokens {
			t.Errorf("stream carried %d tokens, want %d", n, maxTokens)
		}
	} else {
		var u usageBody
		if err := json.Unmarshal([]byte(body), &u); err != nil || u.Usage.CompletionTokens != maxTokens {
			t.Errorf("answer %s: want %d completion tokens", body, maxTokens)
		}
	}
	return resp.Header.Get("X-Kvrouter-Prefill-Worker"), resp.Header.Get("X-Kvrouter-Worker")
}

func pdRig(t *testing.T, protocol string, cfg func(*config.Config)) *rig {
	return newRig(t, rigOpt{workers: 4, prefill: 2, decode: 2, pdProtocol: protocol, cfg: func(c *config.Config) {
		c.Frontend.PD.Protocol = protocol
		if cfg != nil {
			cfg(c)
		}
	}})
}

func testPD(t *testing.T, protocol string) {
	r := pdRig(t, protocol, nil)
	prefills := map[string]bool{"mock-1": true, "mock-2": true}
	decodes := map[string]bool{"mock-3": true, "mock-4": true}
	for _, stream := range []bool{false, true} {
		resp, body := r.post("/v1/completions", pdBody("Once upon a time in a disaggregated fleet", 5, stream))
		p, d := pdAnswer(t, resp, body, 5, stream)
		if !prefills[p] || !decodes[d] {
			t.Errorf("stream %v: prefill %q, decode %q; want a prefill worker then a decode worker", stream, p, d)
		}
	}
	chat := map[string]any{"model": model, "max_tokens": 3, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "Hello over two hops"}}}
	resp, body := r.post("/v1/chat/completions", chat)
	if resp.StatusCode != 200 || !strings.Contains(body, "data: [DONE]") || !prefills[resp.Header.Get("X-Kvrouter-Prefill-Worker")] {
		t.Fatalf("chat: %d %q %s", resp.StatusCode, resp.Header.Get("X-Kvrouter-Prefill-Worker"), body)
	}

	// The same long prompt twice: the second prefill goes where the
	// first one left the prompt's blocks, and finds them cached there.
	long := longText()
	resp, body = r.post("/v1/completions", pdBody(long, 4, false))
	first, _ := pdAnswer(t, resp, body, 4, false)
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		q := r.queryText(long)
		return q[first] > 0, "the first prefill worker's blocks indexed"
	}, "prompt indexed on the prefill worker")
	_, plan := r.post("/v1/route", map[string]any{"model": model, "prompt": long})
	var v struct {
		PD struct {
			PrefillWorker  string `json:"prefill_worker"`
			UncachedTokens int    `json:"uncached_tokens"`
			Reason         string `json:"reason"`
		} `json:"pd"`
		Worker string `json:"worker"`
	}
	if err := json.Unmarshal([]byte(plan), &v); err != nil || v.PD.PrefillWorker != first || !decodes[v.Worker] || v.PD.UncachedTokens >= 1000 {
		t.Errorf("/v1/route after the first request: %s; want prefill on %s with part of the prompt cached", plan, first)
	}
	// The preview plans what serving would: another tenant's salt finds
	// none of the prompt cached (it used to be planned unsalted).
	_, plan = r.post("/v1/route", map[string]any{"model": model, "prompt": long, "cache_salt": "another tenant"})
	var salted struct {
		PD struct {
			UncachedTokens int `json:"uncached_tokens"`
		} `json:"pd"`
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal([]byte(plan), &salted); err != nil || salted.InputTokens < 1000 || salted.PD.UncachedTokens != salted.InputTokens {
		t.Errorf("/v1/route with another cache_salt: %s; want all of its input tokens uncached (unsalted: %d uncached)", plan, v.PD.UncachedTokens)
	}
	resp, body = r.post("/v1/completions", pdBody(long, 4, true))
	if second, _ := pdAnswer(t, resp, body, 4, true); second != first {
		t.Errorf("the same long prompt went to prefill worker %s, then %s", first, second)
	}

	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		n := 0
		for _, w := range r.fleet.Workers {
			n += w.Worker.Holds()
		}
		return n == 0, "prefill workers still hold blocks"
	}, "every prefill's blocks pulled")
	if got := r.metric("kvrouter_pd_requests_total", "path", "disaggregated"); got != 5 {
		t.Errorf("kvrouter_pd_requests_total{path=disaggregated} = %v, want 5", got)
	}
	if _, w := r.get("/v1/workers"); !strings.Contains(w, `"role":"prefill"`) || !strings.Contains(w, `"role":"decode"`) {
		t.Errorf("/v1/workers shows no roles: %s", w)
	}
	if _, st := r.get("/?format=json"); !strings.Contains(st, `"pd":{"protocol":"`+protocol+`","prefill_worker":"mock-`) {
		t.Errorf("the status page's decision records lack the prefill choice: %.2000s", st)
	}
	if r.metric("kvrouter_worker_role", "worker", "mock-1", "role", "prefill") != 1 {
		t.Error("kvrouter_worker_role does not say mock-1 is a prefill worker")
	}
}

// TestPDVLLM: the NixlConnector flow, streamed and not.
func TestPDVLLM(t *testing.T) { testPD(t, "vllm") }

// TestPDSGLang: the bootstrap flow, both hops at once.
func TestPDSGLang(t *testing.T) { testPD(t, "sglang") }

// TestPDBypass: a prompt whose uncached part is under --pd-bypass-tokens
// skips the prefill hop: a decode worker serves it whole, the header is
// empty and the record says why.
func TestPDBypass(t *testing.T) {
	r := pdRig(t, "vllm", func(c *config.Config) { c.Frontend.PD.BypassTokens = 1 << 20 })
	resp, body := r.post("/v1/completions", pdBody("short", 3, false))
	p, d := pdAnswer(t, resp, body, 3, false)
	if p != "" || (d != "mock-3" && d != "mock-4") {
		t.Errorf("bypassed request: prefill %q, decode %q; want no prefill worker and a decode worker", p, d)
	}
	_, plan := r.post("/v1/route", map[string]any{"model": model, "prompt": "short"})
	if !strings.Contains(plan, `"bypassed":true`) || !strings.Contains(plan, "under the bypass threshold") {
		t.Errorf("/v1/route does not explain the bypass: %s", plan)
	}
	if r.metric("kvrouter_pd_requests_total", "path", "bypass") != 1 {
		t.Error("bypass not counted")
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
}

// failing is a worker that answers every completion with 500 (and is
// healthy otherwise); calls counts the completions it refused.
func failing(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost {
			calls.Add(1)
			http.Error(rw, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
			return
		}
		rw.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s, &calls
}

// TestPDPrefillFailover: a prefill worker that fails is excluded and the
// other prefill worker computes the prompt; with no prefill worker left
// the decode worker serves the whole request. No booking leaks.
func TestPDPrefillFailover(t *testing.T) {
	bad, calls := failing(t)
	r := newRig(t, rigOpt{workers: 2, prefill: 1, decode: 1, cfg: func(c *config.Config) {
		c.Events.HealthInterval = 0
		c.Workers = append(c.Workers, fleet.StaticWorker{Name: "bad-prefill", URL: bad.URL, Role: "prefill"})
	}})
	for i := 0; calls.Load() == 0; i++ {
		if i == 30 {
			t.Fatal("the failing prefill worker was never chosen")
		}
		resp, body := r.post("/v1/completions", pdBody("failover prompt "+strings.Repeat("x ", i), 2, i%2 == 1))
		if p, d := pdAnswer(t, resp, body, 2, i%2 == 1); p != "mock-1" || d != "mock-2" {
			t.Fatalf("request %d: prefill %q, decode %q; want mock-1 then mock-2", i, p, d)
		}
	}
	if r.metric("kvrouter_pd_prefill_failures_total", "reason", "status_5xx") < 1 {
		t.Error("the prefill failure was not counted")
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")

	// Only the failing prefill worker left: the bypass serves it.
	if err := r.fleet.Workers[0].Stop(); err != nil {
		t.Fatal(err)
	}
	resp, body := r.post("/v1/completions", pdBody("no prefill worker left", 2, false))
	if p, d := pdAnswer(t, resp, body, 2, false); p != "" || d != "mock-2" {
		t.Errorf("with every prefill worker failing: prefill %q, decode %q; want the bypass on mock-2", p, d)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
}

// TestPDDecodeFailover: a decode worker failing before its first byte is
// excluded and the request starts again, with a fresh prefill, on the
// other decode worker. No booking leaks.
func TestPDDecodeFailover(t *testing.T) {
	for _, protocol := range []string{"vllm", "sglang"} {
		t.Run(protocol, func(t *testing.T) {
			bad, calls := failing(t)
			r := newRig(t, rigOpt{workers: 2, prefill: 1, decode: 1, pdProtocol: protocol, cfg: func(c *config.Config) {
				c.Events.HealthInterval = 0
				c.Frontend.PD.Protocol = protocol
				c.Workers = append(c.Workers, fleet.StaticWorker{Name: "bad-decode", URL: bad.URL, Role: "decode"})
			}})
			for i := 0; calls.Load() == 0; i++ {
				if i == 30 {
					t.Fatal("the failing decode worker was never chosen")
				}
				resp, body := r.post("/v1/completions", pdBody("decode failover "+strings.Repeat("y ", i), 3, i%2 == 0))
				if p, d := pdAnswer(t, resp, body, 3, i%2 == 0); p != "mock-1" || d != "mock-2" {
					t.Fatalf("request %d: prefill %q, decode %q; want mock-1 then mock-2", i, p, d)
				}
			}
			if r.metric("kvrouter_frontend_retries_total") < 1 {
				t.Error("the decode failure was not retried")
			}
			poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
		})
	}
}

// queryText is /v1/query of a prompt text: each worker's overlap.
func (r *rig) queryText(prompt string) map[string]int {
	r.t.Helper()
	resp, body := r.post("/v1/query", map[string]any{"model": model, "prompt": prompt})
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("query: %d %s", resp.StatusCode, body)
	}
	var q queryResp
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		r.t.Fatalf("query body %q: %v", body, err)
	}
	out := map[string]int{}
	for _, w := range q.Workers {
		out[w.Worker] = w.OverlapBlocks
	}
	return out
}

// hanging is a worker that never answers a completion: with headers
// first (a stream that never carries a token) or with nothing at all.
func hanging(t *testing.T, headers bool) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	stop := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			rw.WriteHeader(http.StatusOK)
			return
		}
		calls.Add(1)
		if headers {
			rw.Header().Set("Content-Type", "text/event-stream")
			rw.WriteHeader(http.StatusOK)
			rw.(http.Flusher).Flush()
		}
		select {
		case <-req.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); s.Close() })
	return s, &calls
}

// TestPDPrefillTimeout: a prefill worker that never answers is given up
// after --pd-prefill-timeout; with no other prefill worker the decode
// worker serves the whole request. No booking leaks.
func TestPDPrefillTimeout(t *testing.T) {
	stuck, calls := hanging(t, false)
	r := newRig(t, rigOpt{workers: 1, decode: 1, cfg: func(c *config.Config) {
		c.Events.HealthInterval = 0
		c.Frontend.PD.PrefillTimeout = 200 * time.Millisecond
		c.Workers = append(c.Workers, fleet.StaticWorker{Name: "stuck-prefill", URL: stuck.URL, Role: "prefill"})
	}})
	resp, body := r.post("/v1/completions", pdBody("a prefill that never ends", 2, false))
	if p, d := pdAnswer(t, resp, body, 2, false); p != "" || d != "mock-1" || calls.Load() != 1 {
		t.Errorf("prefill %q, decode %q after %d prefill calls; want the bypass on mock-1 after one", p, d, calls.Load())
	}
	if r.metric("kvrouter_pd_prefill_failures_total", "reason", "timeout") != 1 {
		t.Error("the prefill timeout was not counted")
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
}

// TestPDTransferTimeout: a decode worker whose KV never arrives (its
// stream never carries a token) is bounded by the stream idle timeout:
// the client gets 504 and both hops' bookings are freed.
func TestPDTransferTimeout(t *testing.T) {
	stuck, calls := hanging(t, true)
	r := newRig(t, rigOpt{workers: 1, prefill: 1, cfg: func(c *config.Config) {
		c.Events.HealthInterval = 0
		c.Frontend.StreamIdleTimeout = 300 * time.Millisecond
		c.Workers = append(c.Workers, fleet.StaticWorker{Name: "stuck-decode", URL: stuck.URL, Role: "decode"})
	}})
	resp, body := r.post("/v1/completions", pdBody("a transfer that never completes", 2, true))
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "worker_timeout") || calls.Load() != 1 {
		t.Errorf("status %d after %d decode calls: %s; want 504 worker_timeout after one", resp.StatusCode, calls.Load(), body)
	}
	if p := resp.Header.Get("X-Kvrouter-Prefill-Worker"); p != "mock-1" {
		t.Errorf("prefill worker %q, want mock-1", p)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "every booking freed")
}

// TestPDWorkersDieUnderLoad: 2 prefill and 2 decode workers under
// concurrent streamed and whole requests; one prefill and one decode
// worker are stopped mid-run. Every request ends (an answer, or an error
// for those cut mid-response), requests after the deaths are served by
// the survivors, and no booking is left.
func TestPDWorkersDieUnderLoad(t *testing.T) {
	r := pdRig(t, "vllm", nil)
	var ok, failed atomic.Int64
	run := func(g, n int) {
		for i := range n {
			stream := (g+i)%2 == 0
			b, _ := json.Marshal(pdBody(fmt.Sprintf("load %d %d %s", g, i, strings.Repeat("z ", 40*(i%5))), 8, stream))
			resp, err := r.client.Post(r.url+"/v1/completions", "application/json", bytes.NewReader(b))
			if err != nil {
				failed.Add(1)
				continue
			}
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && rerr == nil && !strings.Contains(string(body), `"error"`) {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() { run(g, 15) })
	}
	poll.Until(t, 10*time.Second, func() bool { return ok.Load() >= 10 }, "the first answers")
	if err := r.fleet.Workers[0].Stop(); err != nil { // prefill mock-1
		t.Fatal(err)
	}
	if err := r.fleet.Workers[2].Stop(); err != nil { // decode mock-3
		t.Fatal(err)
	}
	wg.Wait()
	t.Logf("%d answered, %d failed while workers died; %v prefill failures, %v retries", ok.Load(), failed.Load(),
		r.metric("kvrouter_pd_prefill_failures_total"), r.metric("kvrouter_frontend_retries_total"))
	// After the deaths: the survivors serve everything.
	for i := range 6 {
		resp, body := r.post("/v1/completions", pdBody(fmt.Sprintf("after %d", i), 3, i%2 == 0))
		if p, d := pdAnswer(t, resp, body, 3, i%2 == 0); p != "mock-2" || d != "mock-4" {
			t.Errorf("after the deaths: prefill %q, decode %q; want mock-2 and mock-4", p, d)
		}
	}
	poll.UntilState(t, 10*time.Second, r.noBookings, "every booking freed")
}
