package server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func FuzzParseKVEventsConfig(f *testing.F) {
	for _, s := range []string{`{}`, `{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5600"}`,
		`{"enable_kv_cache_events":true,"endpoint":"inproc://x"}`, `{"hwm":-1}`, `[`, `{"endpoint":"tcp://*:99999999999999999999"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseKVEventsConfig(s)
		if err != nil || !c.Enabled() {
			return
		}
		// An accepted config has endpoints that rank 0 can bind as given.
		if ep, err := OffsetEndpoint(c.Endpoint, 0); err != nil || ep != c.Endpoint {
			t.Fatalf("accepted endpoint %q: %q, %v", c.Endpoint, ep, err)
		}
	})
}

// Any request body gets a well-formed answer: 200 or a 4xx JSON error,
// never a panic or a 5xx. The engine is not running, so the fuzzer only
// sees bodies that fail validation or that would queue (answered 503 once
// the handler's context ends).
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{`{"prompt":"a b","max_tokens":1}`, `{"prompt":[[1,2],[3]]}`, `{"prompt":[1,-2]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, `{"prompt":null}`, `{"max_tokens":-1}`,
		`{"prompt":"x","n":2}`, `{"prompt":"x","data_parallel_rank":9}`, `{"prompt":"x","model":"m"}`} {
		f.Add("/v1/completions", s)
		f.Add("/v1/chat/completions", s)
		f.Add("/tokenize", s)
	}
	c := testConfig()
	c.Engine.NumGPUBlocks = 8
	w, err := New(c)
	if err != nil {
		f.Fatal(err)
	}
	h := w.Handler()
	f.Fuzz(func(t *testing.T, path, body string) {
		switch path {
		case "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize":
		default:
			return
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewBufferString(body))
		ctx, cancel := context.WithCancel(req.Context())
		cancel() // a request that passes validation must not wait for the (stopped) engine
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: status %d %s", path, body, rec.Code, rec.Body.String())
		}
	})
}

// Requests go end to end through running engines: a real listener, two
// data-parallel ranks stepping on the real clock, a client with a bounded
// wait per input. Whatever the body and the X-Data-Parallel-Rank header,
// the answer is 200 or a 4xx JSON error (503 only when the wait ran out),
// and the worker still serves afterwards; a panic in any goroutine — a rank
// loop included — fails the target by crashing it.
func FuzzRequestsThroughEngine(f *testing.F) {
	for _, s := range []string{`{"prompt":"hi","max_tokens":9223372036854775807}`,
		`{"prompt":"hi","max_tokens":9223372036854775806}`, `{"prompt":"hi","max_completion_tokens":9223372036854775807}`,
		`{"prompt":"a b","max_tokens":1}`, `{"prompt":[[1,2],[3]],"max_tokens":3}`, `{"prompt":["a","b","c"],"stream":true}`,
		`{"prompt":"x","max_tokens":100,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":2}`, `{"prompt":[4294967295]}`,
		`{"prompt":"x","data_parallel_rank":-5}`, `{"prompt":"x","data_parallel_rank":1}`, `{"prompt":"x","n":1}`} {
		f.Add("/v1/completions", s, "")
		f.Add("/v1/chat/completions", s, "1")
		f.Add("/tokenize", s, "")
	}
	f.Add("/v1/completions", `{"prompt":"x"}`, "-1")
	f.Add("/v1/completions", `{"prompt":"x"}`, "9223372036854775807")
	c := testConfig()
	c.DataParallelSize = 2
	c.Engine.NumGPUBlocks = 16 // max model len 16 blocks x 16 tokens: every accepted request ends quickly
	c.Engine.SpeedupRatio = 1e6
	w, err := New(c)
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Serve(ctx, ln) }()
	f.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			f.Error(err)
		}
	})
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	f.Cleanup(client.CloseIdleConnections)
	f.Fuzz(func(t *testing.T, path, body, rank string) {
		switch path {
		case "/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize":
		default:
			return
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+path, bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if rank != "" {
			for _, r := range rank { // header values must be printable
				if r < 0x20 || r > 0x7e {
					return
				}
			}
			req.Header.Set("X-Data-Parallel-Rank", rank)
		}
		resp, err := client.Do(req)
		if err != nil {
			if rctx.Err() != nil {
				return // the wait per input ran out: a long generation, not a defect
			}
			t.Fatalf("%s %q (rank %q): %v", path, body, rank, err)
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		if rerr != nil && rctx.Err() == nil {
			t.Fatalf("%s %q: reading the response: %v", path, body, rerr)
		}
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s %q (rank %q): status %d %s", path, body, rank, resp.StatusCode, b)
		}
		hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer hcancel()
		hreq, _ := http.NewRequestWithContext(hctx, http.MethodPost, base+"/v1/completions",
			bytes.NewBufferString(`{"prompt":"still there","max_tokens":1}`))
		hresp, err := client.Do(hreq)
		if err != nil {
			t.Fatalf("after %s %q: worker gone: %v", path, body, err)
		}
		_, _ = io.Copy(io.Discard, hresp.Body)
		hresp.Body.Close()
		if hresp.StatusCode != http.StatusOK {
			t.Fatalf("after %s %q: a plain request got %d", path, body, hresp.StatusCode)
		}
	})
}
