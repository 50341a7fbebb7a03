package router

import (
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// TestObserveSteersKVTime: three idle workers, nothing cached. Cold, the
// kv-time rows predict the prior for 1,000 tokens on each. After worker
// 1 reports TTFTs twice the prior's for a minute, its row predicts about
// twice the prior and kv-time never picks it while all are idle; removing it drops its model.
func TestObserveSteersKVTime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = "kv-time"
	r := newRouter(t, cfg, serialIndex(t), 3)
	prior := timemodel.PriorPrefillMs(1000) / 1e3
	d, err := r.Plan(Request{ID: "p", Tokens: tokens(1, 1, 0, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range d.Candidates {
		if math.Abs(c.Prediction.TTFT-prior) > 1e-12 {
			t.Fatalf("cold row %v predicts %v s, prior %v", c.Worker, c.Prediction.TTFT, prior)
		}
	}
	w1 := kvevent.WorkerRank{ID: 1}
	if r.Observe(kvevent.WorkerRank{ID: 9}, Sample{PromptTokens: 10, TTFT: time.Second}, t0) {
		t.Fatal("unknown worker observed")
	}
	for s := range 60 {
		n := 500 + 50*(s%20)
		ok := r.Observe(w1, Sample{PromptTokens: n + 64, CachedTokens: 64, TTFT: time.Duration(2 * timemodel.PriorPrefillMs(n) * float64(time.Millisecond)),
			ITL: 20 * time.Millisecond}, t0.Add(time.Duration(s)*time.Second))
		if !ok {
			t.Fatal("observe refused a known worker")
		}
	}
	d, _ = r.Plan(Request{ID: "p", Tokens: tokens(1, 1, 0, 1000)})
	if got := d.Candidates[0].Prediction.TTFT / prior; math.Abs(got-2) > 0.1 {
		t.Fatalf("worker 1 predicts %.3f × the prior after slow samples", got)
	}
	for i := range 30 {
		d, err := r.Route(Request{ID: string(rune('a' + i)), Tokens: tokens(2, i, 0, 1000)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker == w1 {
			t.Fatalf("request %d went to the slow worker: %+v", i, d.Candidates)
		}
		r.Free(d.RequestID) // every worker idle again
	}
	ms := r.TimeModels()
	if len(ms) != 1 || ms[0].Worker != w1 || ms[0].PrefillSamples != 60 || ms[0].DecodeSamples != 60 || r.Stats().Observations != 60 {
		t.Fatalf("time models %+v, observations %d", ms, r.Stats().Observations)
	}
	if err := r.RemoveWorker(1); err != nil {
		t.Fatal(err)
	}
	if ms := r.TimeModels(); len(ms) != 0 {
		t.Fatalf("removed worker's model kept: %+v", ms)
	}
}
