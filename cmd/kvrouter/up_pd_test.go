package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestUpDisaggregated runs `kvrouter up --prefill-workers 2
// --decode-workers 2` (workers registered in the embedded NATS with their
// roles) for each protocol: a response names a prefill and a decode
// worker, and the same long prompt sent twice reuses the prefill worker
// that holds it.
func TestUpDisaggregated(t *testing.T) {
	for _, protocol := range []string{"vllm", "sglang"} {
		t.Run(protocol, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr logtest.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"up", "--port", "0", "--prefill-workers", "2", "--decode-workers", "2", "--pd-protocol", protocol,
					"--nats-port", "-1", "--data-dir", t.TempDir(), "--speedup-ratio", "100", "--num-gpu-blocks-override", "1024"},
					nil, &stdout, &stderr)
			}()
			base := waitMatch(t, &stdout, regexp.MustCompile(`router at (http://\S+)`))
			if !strings.Contains(stdout.String(), "disaggregated: mock-1..mock-2 prefill") {
				t.Errorf("banner does not describe the disaggregated fleet:\n%s", stdout.String())
			}
			waitWorkersExact(t, base, 4)
			long := strings.Repeat("A long shared document that the prefill worker keeps in its cache. ", 60)
			send := func() (string, string) {
				b, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": long, "max_tokens": 4})
				resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				return resp.Header.Get("X-Kvrouter-Prefill-Worker"), resp.Header.Get("X-Kvrouter-Worker")
			}
			p1, d1 := send()
			if (p1 != "mock-1" && p1 != "mock-2") || (d1 != "mock-3" && d1 != "mock-4") {
				t.Fatalf("first request: prefill %q, decode %q", p1, d1)
			}
			// Wait until the router has indexed the prompt on p1 (its KV
			// events have arrived), then send it again.
			poll.Until(t, 10*time.Second, func() bool {
				b, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": long})
				resp, err := http.Post(base+"/v1/route", "application/json", bytes.NewReader(b))
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				var v struct {
					PD struct {
						PrefillWorker  string `json:"prefill_worker"`
						UncachedTokens int    `json:"uncached_tokens"`
					} `json:"pd"`
					InputTokens int `json:"input_tokens"`
				}
				return json.NewDecoder(resp.Body).Decode(&v) == nil && v.PD.PrefillWorker == p1 && v.PD.UncachedTokens < v.InputTokens/2
			}, "the router sees the prompt cached on the first prefill worker")
			if p2, _ := send(); p2 != p1 {
				t.Errorf("the same long prompt went to prefill worker %s, then %s", p1, p2)
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("up exited %d:\n%s", code, stderr.String())
			}
		})
	}
}
