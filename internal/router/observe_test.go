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

// TestKVTimeCreditsPrefillInProgress: a request of 4,000 tokens booked
// on worker 1 at t0. 40 ms later a plan for 1,000 tokens sees 40 ms of
// that prefill behind worker 1: its queue is the booked tokens' share of
// the pass (with one running request's decode token) less 40 ms. After a
// second booking at 50 ms and the first request's first token at 60 ms,
// progress counts from the completion: 10 ms into the second request's
// prefill at 70 ms (now with two running requests).
func TestKVTimeCreditsPrefillInProgress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = "kv-time"
	now := t0
	r, err := New(cfg, serialIndex(t), func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(WorkerInfo{ID: 1, BlockSize: cfg.BlockSize}); err != nil {
		t.Fatal(err)
	}
	book := func(id string, family int) {
		t.Helper()
		if _, err := r.Route(Request{ID: id, Tokens: tokens(family, 0, 0, 4000)}); err != nil {
			t.Fatal(err)
		}
	}
	queue := func(at time.Duration) (float64, time.Duration) {
		t.Helper()
		now = t0.Add(at)
		d, err := r.Plan(Request{ID: "probe", Tokens: tokens(9, 0, 0, 1000)})
		if err != nil {
			t.Fatal(err)
		}
		row := d.ChosenRow()
		return row.Prediction.Queue, row.PrefillElapsed
	}
	// One pass (default chunk 8,192): booked + own + one token per
	// running request, less the own tokens' pass.
	share := func(running float64) float64 {
		return (timemodel.PriorPrefillMs(int(5000+running)) - timemodel.PriorPrefillMs(int(1000+running))) / 1e3
	}
	book("a", 1)
	if q, e := queue(40 * time.Millisecond); e != 40*time.Millisecond || math.Abs(q-(share(1)-0.04)) > 1e-9 {
		t.Fatalf("40 ms into a: queue %v s, elapsed %v; want %v s, 40ms", q, e, share(1)-0.04)
	}
	now = t0.Add(50 * time.Millisecond)
	book("b", 2)
	now = t0.Add(60 * time.Millisecond)
	if !r.MarkPrefillCompleted("a") {
		t.Fatal("a not running")
	}
	if q, e := queue(70 * time.Millisecond); e != 10*time.Millisecond || math.Abs(q-(share(2)-0.01)) > 1e-9 {
		t.Fatalf("10 ms into b: queue %v s, elapsed %v; want %v s, 10ms", q, e, share(2)-0.01)
	}
}
