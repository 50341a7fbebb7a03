package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/prometheus/client_golang/prometheus"
)

// fleetFront is a front door over n approximate workers (all served by
// one stub) that has proxied RecentDecisions completions, so the status
// page's table holds that many decisions of n candidates each.
func fleetFront(b testing.TB, n int) (*httptest.Server, *http.Client) {
	stub := httptest.NewServer(stubWorker())
	b.Cleanup(stub.Close)
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	r, err := router.New(router.DefaultConfig(), router.NewSerial(x), time.Now, nil)
	if err != nil {
		b.Fatal(err)
	}
	dir := &testDir{}
	for i := range n {
		id := kvevent.WorkerID(i + 1)
		if err := r.AddWorker(router.WorkerInfo{ID: id, BlockSize: 16, Mode: router.Approximate, KVCapacityBlocks: 16384}); err != nil {
			b.Fatal(err)
		}
		dir.set(WorkerEntry{ID: id, Name: fmt.Sprint("worker-", i+1), URL: stub.URL, Status: fleet.Status{State: fleet.StateApprox}})
	}
	cfg := DefaultConfig()
	f, err := New(cfg, Deps{Router: r, Directory: dir, Tokenizer: testTokenizer(b), ChatTemplate: testTemplate(b),
		Index: router.NewSerial(x), Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	front := httptest.NewServer(f.Handler())
	b.Cleanup(front.Close)
	b.Cleanup(f.CloseIdleConnections)
	client := &http.Client{}
	b.Cleanup(client.CloseIdleConnections)
	for i, p := range benchPrompts(b, cfg.RecentDecisions, 1024) {
		body, _ := json.Marshal(map[string]any{"model": testModel, "prompt": p, "max_tokens": 8, "stream": true})
		resp, err := client.Post(front.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("completion %d: status %d", i, resp.StatusCode)
		}
	}
	return front, client
}

// BenchmarkFleetPages times GET /?format=json (the status page's data,
// fetched by the page every refresh), GET / (the page with its first data
// inlined) and GET /v1/workers with 64, 256 and 1,024 workers, after
// RecentDecisions (50) completions, and reports each body's size.
func BenchmarkFleetPages(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			front, client := fleetFront(b, n)
			for _, path := range []string{"/?format=json", "/", "/v1/workers"} {
				b.Run(path, func(b *testing.B) {
					size := 0
					for b.Loop() {
						resp, err := client.Get(front.URL + path)
						if err != nil {
							b.Fatal(err)
						}
						m, _ := io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							b.Fatalf("status %d", resp.StatusCode)
						}
						size = int(m)
					}
					b.ReportMetric(float64(size), "bytes")
				})
			}
		})
	}
}

// BenchmarkFleetCompletion is the front door's cost per proxied
// completion (1 k-token prompts, streamed) with 64, 256 and 1,024
// workers: routing plus rendering the decision for the status page.
func BenchmarkFleetCompletion(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			front, client := fleetFront(b, n)
			prompts := benchPrompts(b, 64, 1024)
			bodies := make([][]byte, len(prompts))
			for i, p := range prompts {
				bodies[i], _ = json.Marshal(map[string]any{"model": testModel, "prompt": p, "max_tokens": 8, "stream": true})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := client.Post(front.URL+"/v1/completions", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				i++
			}
		})
	}
}
