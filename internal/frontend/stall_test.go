package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// stallWorker is a real HTTP worker that answers like vLLM, then goes
// silent at a chosen point until the router gives up on it (its request
// context ends), which it records.
type stallWorker struct {
	url string
	// cancelled counts requests whose context ended while stalled.
	cancelled atomic.Int32
}

// stall points.
const (
	stallBeforeHeaders = iota // nothing at all
	stallAfterHeaders         // headers, no body byte
	stallAfterChunks          // headers and chunks SSE events
	stallMidBody              // headers (chunked) and half a JSON body
	slowButAlive              // chunks events, gap apart, then [DONE]
)

func newStallWorker(t *testing.T, point, chunks int, gap time.Duration) *stallWorker {
	t.Helper()
	sw := &stallWorker{}
	sw.url = newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc := http.NewResponseController(rw)
		stall := func() {
			<-r.Context().Done()
			sw.cancelled.Add(1)
		}
		if point == stallBeforeHeaders {
			stall()
			return
		}
		if point == stallMidBody {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(rw, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"te`)
			_ = rc.Flush()
			stall()
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		if point == stallAfterHeaders {
			stall()
			return
		}
		for i := range chunks {
			if i > 0 && gap > 0 {
				time.Sleep(gap)
			}
			fmt.Fprintf(rw, "data: {\"id\":\"cmpl-1\",\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
			_ = rc.Flush()
		}
		if point == slowButAlive {
			_, _ = io.WriteString(rw, "data: [DONE]\n\n")
			return
		}
		stall()
	}))
	return sw
}

// stallFleet is a front door with one worker, sw, and the given stream
// idle timeout.
func stallFleet(t *testing.T, sw *stallWorker, idle time.Duration, cfg func(*Config)) *testFleet {
	t.Helper()
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.StreamIdleTimeout = idle
		if cfg != nil {
			cfg(c)
		}
	}})
	fl.dir.set(WorkerEntry{ID: kvevent.WorkerID(1), Name: "w1", URL: sw.url,
		Status: fleet.Status{State: fleet.StateApprox, Since: time.Now()}})
	return fl
}

// errorCode returns error.code of an OpenAI error body ("" when none).
func errorCode(t *testing.T, b string) string {
	t.Helper()
	var e struct {
		Error struct {
			Code *string `json:"code"`
			Type string  `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(b), &e); err != nil {
		t.Fatalf("not an OpenAI error body: %q: %v", b, err)
	}
	if e.Error.Code == nil {
		return ""
	}
	return *e.Error.Code
}

// A streaming worker that sends its headers and two chunks, then goes
// silent: the client gets both chunks, then an SSE error event in the
// OpenAI error shape (code worker_timeout), after about the idle timeout
// and well before the worker would ever finish; the upstream request is
// cancelled, the booking freed and the timeout counted (stage mid_stream).
func TestStreamIdleTimeoutMidStream(t *testing.T) {
	const idle = 300 * time.Millisecond
	sw := newStallWorker(t, stallAfterChunks, 2, 0)
	fl := stallFleet(t, sw, idle, nil)
	start := time.Now()
	resp, body := fl.do(http.MethodPost, "/v1/completions",
		map[string]any{"model": testModel, "prompt": "hello there", "max_tokens": 50, "stream": true})
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	evs := sseEvents(body)
	if len(evs) != 3 || !strings.Contains(evs[0], `"t0"`) || !strings.Contains(evs[1], `"t1"`) {
		t.Fatalf("want 2 chunks and an error event, got %q", evs)
	}
	if c := errorCode(t, evs[2]); c != codeWorkerTimeout {
		t.Fatalf("last event code %q, want %s: %s", c, codeWorkerTimeout, evs[2])
	}
	if took < idle || took > idle+3*time.Second {
		t.Errorf("client waited %v; want about the idle timeout %v", took, idle)
	}
	fl.waitIdle()
	poll.Until(t, 5*time.Second, func() bool { return sw.cancelled.Load() == 1 }, "the upstream request to be cancelled")
	if got := fl.metric("kvrouter_frontend_worker_stream_timeouts_total", "worker", "w1", "stage", "mid_stream"); got != 1 {
		t.Errorf("stream timeouts metric = %v, want 1", got)
	}
	if got := fl.metric("kvrouter_frontend_requests_total", "route", "completions", "status", "200"); got != 1 {
		t.Errorf("requests_total{200} = %v, want 1", got)
	}
}

// Before anything was sent to the client the answer is a 504 JSON error
// (no retry on another worker), for each point where a worker can go
// silent: a stream's headers, and the first body byte after the headers.
func TestStreamIdleTimeoutBeforeCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		point  int
		stream bool
		stage  string
	}{
		{"stream headers", stallBeforeHeaders, true, "headers"},
		{"stream first byte", stallAfterHeaders, true, "first_byte"},
		{"non-streaming first byte", stallAfterHeaders, false, "first_byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sw := newStallWorker(t, tc.point, 0, 0)
			fl := stallFleet(t, sw, 200*time.Millisecond, func(c *Config) { c.MaxRetries = 2 })
			resp, body := fl.do(http.MethodPost, "/v1/completions",
				map[string]any{"model": testModel, "prompt": "hello there", "max_tokens": 5, "stream": tc.stream})
			if resp.StatusCode != http.StatusGatewayTimeout {
				t.Fatalf("status %d, want 504: %s", resp.StatusCode, body)
			}
			if c := errorCode(t, string(body)); c != codeWorkerTimeout {
				t.Fatalf("code %q, want %s", c, codeWorkerTimeout)
			}
			if w := resp.Header.Get(HeaderWorker); w != "w1" {
				t.Errorf("%s = %q, want w1", HeaderWorker, w)
			}
			fl.waitIdle()
			poll.Until(t, 5*time.Second, func() bool { return sw.cancelled.Load() == 1 }, "the upstream request to be cancelled")
			if got := fl.metric("kvrouter_frontend_worker_stream_timeouts_total", "stage", tc.stage); got != 1 {
				t.Errorf("stream timeouts{stage=%s} = %v, want 1", tc.stage, got)
			}
			if got := fl.metric("kvrouter_frontend_retries_total"); got != 0 {
				t.Errorf("retried %v times; a timed-out request is not retried", got)
			}
		})
	}
}

// A non-streaming request is not bounded by the idle timeout while it
// waits for headers (that is generation; --worker-response-timeout's job),
// so a worker answering after longer than the idle timeout succeeds.
func TestStreamIdleTimeoutSparesNonStreamingGeneration(t *testing.T) {
	url := newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(400 * time.Millisecond)
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}]}`)
	}))
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.StreamIdleTimeout = 100 * time.Millisecond }})
	fl.dir.set(WorkerEntry{ID: 1, Name: "w1", URL: url, Status: fleet.Status{State: fleet.StateApprox, Since: time.Now()}})
	resp, body := fl.do(http.MethodPost, "/v1/completions", map[string]any{"model": testModel, "prompt": "hi", "max_tokens": 5})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	fl.waitIdle()
}

// A non-streaming body cut short by a silent worker is not handed over
// as if whole: the client's connection is aborted, so its read fails.
func TestStreamIdleTimeoutMidBodyAborts(t *testing.T) {
	sw := newStallWorker(t, stallMidBody, 0, 0)
	fl := stallFleet(t, sw, 200*time.Millisecond, nil)
	req, _ := http.NewRequest(http.MethodPost, fl.front.URL+"/v1/completions",
		strings.NewReader(`{"model":"`+testModel+`","prompt":"hi","max_tokens":5}`))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatalf("the client read a cut-short body as complete: %q", b)
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_worker_stream_timeouts_total", "stage", "mid_stream"); got != 1 {
		t.Errorf("stream timeouts = %v, want 1", got)
	}
	if got := fl.metric("kvrouter_frontend_requests_total", "route", "completions"); got != 1 {
		t.Errorf("aborted request not counted: requests_total = %v", got)
	}
}

// The timeout bounds each silence, not the whole stream: a worker whose
// chunks come gap apart, for longer in total than the timeout, completes.
func TestStreamIdleTimeoutIsPerChunk(t *testing.T) {
	sw := newStallWorker(t, slowButAlive, 6, 60*time.Millisecond) // 300 ms in all
	fl := stallFleet(t, sw, 200*time.Millisecond, nil)
	resp, body := fl.do(http.MethodPost, "/v1/completions",
		map[string]any{"model": testModel, "prompt": "hello there", "max_tokens": 6, "stream": true})
	evs := sseEvents(body)
	if resp.StatusCode != http.StatusOK || len(evs) != 7 || evs[6] != "[DONE]" {
		t.Fatalf("status %d, events %q", resp.StatusCode, evs)
	}
	fl.waitIdle()
	if got := fl.metric("kvrouter_frontend_worker_stream_timeouts_total"); got != 0 {
		t.Errorf("stream timeouts = %v, want 0", got)
	}
}

// Shutdown while a stream is stalled (idle timeout off, so only the
// shutdown can end it) returns within ShutdownTimeout plus a small grace:
// the stream is closed, the upstream request cancelled, the booking freed,
// and its handler has returned (goleak checks the rest).
func TestShutdownDuringStalledStream(t *testing.T) {
	const shutdown = 300 * time.Millisecond
	sw := newStallWorker(t, stallAfterChunks, 1, 0)
	fl := stallFleet(t, sw, 0, func(c *Config) { c.ShutdownTimeout = shutdown })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fl.f.NewServer(ln)
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()

	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/completions",
		strings.NewReader(`{"model":"`+testModel+`","prompt":"hello there","max_tokens":50,"stream":true}`))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, `"t0"`) {
		t.Fatalf("first chunk: %q, %v", line, err)
	}
	if fl.activeRequests() != 1 {
		t.Fatalf("%d requests booked, want 1", fl.activeRequests())
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err == nil {
		t.Error("Shutdown reported a clean drain although a stream was stalled")
	}
	took := time.Since(start)
	if took < shutdown || took > shutdown+handlerGrace {
		t.Errorf("shutdown took %v; want ShutdownTimeout %v (+ at most %v)", took, shutdown, handlerGrace)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Error("the stalled stream ended cleanly for the client; want a cut connection")
	}
	fl.waitIdle()
	poll.Until(t, 5*time.Second, func() bool { return sw.cancelled.Load() == 1 }, "the upstream request to be cancelled")
}
