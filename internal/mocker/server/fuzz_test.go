package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
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
