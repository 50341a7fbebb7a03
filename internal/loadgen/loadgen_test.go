package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/workload"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-zeromq/zmq4 v0.17.0: a closed PUB socket's writer goroutine
		// stays parked (see internal/service's TestMain). Not ours.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}

// fakeSSE streams n tokens per request with gap between them, naming
// itself in the worker header; requests whose prompt contains "fail" get
// a 500.
func fakeSSE(t *testing.T, gap time.Duration, served *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"fail"`) {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		served.Add(1)
		w.Header().Set(HeaderWorker, "w-b")
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range 3 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\ndata: [DONE]\n\n")
	}))
}

func reqs(n int, arrivalStep time.Duration) []workload.Request {
	out := make([]workload.Request, n)
	for i := range out {
		out[i] = workload.Request{Arrival: time.Duration(i) * arrivalStep, Prompt: []uint32{1, 2, 3}, OutputLen: 3}
	}
	return out
}

func TestRunMeasuresStream(t *testing.T) {
	var served atomic.Int64
	srv := fakeSSE(t, 5*time.Millisecond, &served)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.URL = srv.URL
	cfg.Text = func(ids []uint32) string {
		if len(ids) == 1 {
			return "fail"
		}
		return "ok"
	}
	rs := reqs(6, 0)
	rs[2].Prompt = []uint32{9} // rendered as "fail"
	out, err := Run(context.Background(), cfg, workload.NewSlice(rs, 0), "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Result
	if out.Issued != 6 || r.Requests != 5 || r.Failed != 1 || out.Cancelled != 0 {
		t.Fatalf("issued %d, completed %d, failed %d, cancelled %d; want 6, 5, 1, 0", out.Issued, r.Requests, r.Failed, out.Cancelled)
	}
	if len(out.Workers) != 1 || out.Workers[0] != "w-b" || r.MaxWorkerShare != 1 {
		t.Fatalf("workers %v share %v", out.Workers, r.MaxWorkerShare)
	}
	// The server waits 5 ms before each of three tokens: TTFT at least
	// 5 ms and e2e at least 15 ms. Single gaps can shrink on the client
	// (a late write followed by a prompt one), so ITL is only checked to
	// be measured and to fit inside the stream.
	if r.TTFTP50Ms < 5 || r.E2EP50Ms < 15 || r.ITLP50Ms <= 0 || r.ITLP50Ms > r.E2EP50Ms {
		t.Fatalf("ttft %.1f e2e %.1f itl %.1f ms", r.TTFTP50Ms, r.E2EP50Ms, r.ITLP50Ms)
	}
	if want := 5.0 / 7; r.HitRatio < want-1e-9 || r.HitRatio > want+1e-9 {
		t.Fatalf("hit ratio %v, want %v from usage", r.HitRatio, want)
	}
	for msg := range out.Errors {
		if !strings.Contains(msg, "HTTP 500") {
			t.Fatalf("error %q", msg)
		}
	}
}

func TestRunBounds(t *testing.T) {
	var served atomic.Int64
	srv := fakeSSE(t, 100*time.Millisecond, &served)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.URL = srv.URL
	cfg.Concurrency = 4
	cfg.MaxConns = 2
	cfg.MaxRequests = 10
	out, err := Run(context.Background(), cfg, workload.NewSlice(reqs(50, 0), 0), "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Issued != 10 || out.Result.Requests != 10 {
		t.Fatalf("max requests: issued %d, completed %d; want 10", out.Issued, out.Result.Requests)
	}
	// Open loop, arrivals 50 ms apart, stopped after 250 ms: about 5
	// issued, the last ones cut off mid-stream.
	cfg = DefaultConfig()
	cfg.URL = srv.URL
	cfg.Duration = 250 * time.Millisecond
	start := time.Now()
	out, err = Run(context.Background(), cfg, workload.NewSlice(reqs(100, 50*time.Millisecond), 0), "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	if out.Issued < 2 || out.Issued > 7 || out.Cancelled == 0 || out.Result.Failed != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("duration: issued %d, cancelled %d, failed %d after %v", out.Issued, out.Cancelled, out.Result.Failed, time.Since(start))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.URL = "" },
		func(c *Config) { c.URL = "ftp://x" },
		func(c *Config) { c.API = "x" },
		func(c *Config) { c.API = APIChat },
		func(c *Config) { c.MaxConns = 0 },
		func(c *Config) { c.Duration = -1 },
	} {
		c := DefaultConfig()
		c.URL = "http://127.0.0.1:1"
		if err := c.Validate(); err != nil {
			t.Fatalf("default config invalid: %v", err)
		}
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	}
}
