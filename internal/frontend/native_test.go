package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvhash"
)

func TestNativeAPI(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 3})
	prompt := words(7, 100)
	tokens := testTokenizer(t).Encode(prompt, true)
	full := len(tokens) / 16
	resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	cached := resp.Header.Get(HeaderWorker)
	fl.waitIdle()

	t.Run("route", func(t *testing.T) {
		for _, req := range []map[string]any{{"prompt": prompt}, {"tokens": tokens}, {"model": testModel, "tokens": tokens}} {
			resp, body := fl.do("POST", "/v1/route", req)
			var d decisionJSON
			if err := json.Unmarshal(body, &d); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if d.Worker == nil || *d.Worker != cached || d.OverlapBlocks != full || d.InputTokens != len(tokens) ||
				d.Blocks != full || len(d.Candidates) != 3 || d.BlockSize != 16 || d.Policy != "kv" {
				t.Fatalf("decision %s", body)
			}
			var chosen []candidateJSON
			for _, c := range d.Candidates {
				if c.Chosen {
					chosen = append(chosen, c)
				}
			}
			if len(chosen) != 1 {
				t.Fatalf("%d chosen rows", len(chosen))
			}
			if c := chosen[0]; c.Worker != cached || c.OverlapBlocks != full || c.Tiers.Device != full || c.State != "APPROX" {
				t.Fatalf("chosen row %+v", c)
			}
			for _, c := range d.Candidates {
				if !c.Chosen && (c.OverlapBlocks != 0 || c.Cost <= chosen[0].Cost) {
					t.Fatalf("row %+v is not worse than the chosen %+v", c, chosen[0])
				}
			}
		}
		// Plan books nothing.
		if fl.activeRequests() != 0 {
			t.Fatal("route booked a request")
		}
		resp, body := fl.do("POST", "/v1/route", map[string]any{"tokens": tokens, "prompt": prompt})
		if resp.StatusCode != 400 {
			t.Fatalf("two inputs: status %d: %s", resp.StatusCode, body)
		}
		resp, _ = fl.do("POST", "/v1/route", map[string]any{"block_hashes": []uint64{1}})
		if resp.StatusCode != 400 {
			t.Fatalf("block hashes on route: status %d", resp.StatusCode)
		}
	})

	t.Run("query", func(t *testing.T) {
		local, err := kvhash.LocalHashes(tokens, kvhash.Options{BlockSize: 16}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range []map[string]any{{"tokens": tokens}, {"block_hashes": local}, {"prompt": prompt},
			{"block_hashes": local[:3]}} {
			resp, body := fl.do("POST", "/v1/query", req)
			var q queryResponse
			if err := json.Unmarshal(body, &q); err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			want := full
			if bh, ok := req["block_hashes"].([]uint64); ok {
				want = len(bh)
			}
			if q.BlockSize != 16 || q.Blocks != want || len(q.Workers) != 3 {
				t.Fatalf("query %s", body)
			}
			if w := q.Workers[0]; w.Worker != cached || w.OverlapBlocks != want || w.Tiers["device"] != want || w.State != "APPROX" {
				t.Fatalf("first row %+v, want %s with %d blocks", w, cached, want)
			}
			for _, w := range q.Workers[1:] {
				if w.OverlapBlocks != 0 {
					t.Fatalf("row %+v", w)
				}
			}
		}
	})

	t.Run("workers", func(t *testing.T) {
		resp, body := fl.do("GET", "/v1/workers", nil)
		var v struct {
			BlockSize int          `json:"block_size"`
			Workers   []workerJSON `json:"workers"`
		}
		if err := json.Unmarshal(body, &v); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if len(v.Workers) != 3 {
			t.Fatalf("workers %s", body)
		}
		for _, w := range v.Workers {
			if w.State != "APPROX" || w.Reason != "no events" || w.Mode != "approximate" || len(w.Ranks) != 1 || w.URL == "" || w.KVCapacityBlocks != 2048 {
				t.Fatalf("worker %+v", w)
			}
			if w.Worker == cached && (w.Ranks[0].IndexedBlocks != nil) {
				t.Fatalf("serial index reports indexed blocks %+v", w.Ranks[0])
			}
		}
	})

	t.Run("models health ready", func(t *testing.T) {
		_, body := fl.do("GET", "/v1/models", nil)
		if !strings.Contains(string(body), `"id":"`+testModel+`"`) {
			t.Fatalf("models %s", body)
		}
		if resp, _ := fl.do("GET", "/health", nil); resp.StatusCode != 200 {
			t.Fatalf("health %d", resp.StatusCode)
		}
		fl.readyMu.Lock()
		fl.ready = errors.New("initial replay pending")
		fl.readyMu.Unlock()
		resp, body := fl.do("GET", "/ready", nil)
		if resp.StatusCode != 503 || !strings.Contains(string(body), "initial replay pending") {
			t.Fatalf("ready %d %s", resp.StatusCode, body)
		}
		fl.readyMu.Lock()
		fl.ready = nil
		fl.readyMu.Unlock()
		if resp, _ := fl.do("GET", "/ready", nil); resp.StatusCode != 200 {
			t.Fatalf("ready %d", resp.StatusCode)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		_, body := fl.do("GET", "/metrics", nil)
		for _, name := range []string{"kvrouter_frontend_requests_total", "kvrouter_frontend_time_to_first_token_seconds",
			"kvrouter_frontend_routing_decision_seconds", "kvrouter_frontend_overlap_blocks", "kvrouter_frontend_worker_active_requests{dp_rank=\"0\",worker=\"w1\"} 0",
			"kvrouter_frontend_cached_tokens_error_bucket"} {
			if !strings.Contains(string(body), name) {
				t.Fatalf("metrics lack %s", name)
			}
		}
	})

	t.Run("status page", func(t *testing.T) {
		resp, body := fl.do("GET", "/", nil)
		s := string(body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Fatalf("status %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for _, want := range []string{`"refresh_seconds":5`, "w1", "w2", "w3", "APPROX", "no events", cached, `"endpoint":"completions"`, `"policy":"kv"`} {
			if !strings.Contains(s, want) {
				t.Fatalf("status page lacks %q:\n%s", want, s)
			}
		}
	})
}

// Without an Index dependency, /v1/query answers from the router's plan.
func TestQueryWithoutIndex(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	fl.f.idx = nil
	prompt := words(8, 80)
	resp, _ := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	cached := resp.Header.Get(HeaderWorker)
	fl.waitIdle()
	n := len(testTokenizer(t).Encode(prompt, true)) / 16
	_, body := fl.do("POST", "/v1/query", map[string]any{"prompt": prompt})
	var q queryResponse
	if err := json.Unmarshal(body, &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Workers) != 2 || q.Workers[0].Worker != cached || q.Workers[0].OverlapBlocks != n || q.Workers[1].OverlapBlocks != 0 {
		t.Fatalf("query %s", body)
	}
	if resp, _ := fl.do("POST", "/v1/query", map[string]any{"block_hashes": []uint64{1}}); resp.StatusCode != 400 {
		t.Fatalf("block hashes without index: %d", resp.StatusCode)
	}
}

// Shutdown lets an in-flight stream finish, then returns; new connections
// are refused.
func TestServerShutdownFinishesStreams(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 50})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fl.f.NewServer(ln)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	url := "http://" + srv.Addr().String()
	b, _ := json.Marshal(map[string]any{"prompt": "tell me", "max_tokens": 40, "stream": true})
	resp, err := fl.client.Post(url+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(context.Background()) }()
	rest, err := io.ReadAll(rd)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("stream cut at shutdown: %v %q", err, rest)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if _, err := fl.client.Get(url + "/health"); err == nil {
		t.Fatal("server still accepts after shutdown")
	}
	fl.waitIdle()
}

// A stream still running at the shutdown bound is cut and its booking
// freed.
func TestServerShutdownBound(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 2, cfg: func(c *Config) { c.ShutdownTimeout = 200 * time.Millisecond }})
	fl.f.log = slog.New(slog.DiscardHandler)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fl.f.NewServer(ln)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve() }()
	b, _ := json.Marshal(map[string]any{"prompt": "tell me", "max_tokens": 5000, "stream": true})
	resp, err := fl.client.Post("http://"+srv.Addr().String()+"/v1/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := srv.Shutdown(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown err %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	<-errc
	fl.waitIdle()
}
