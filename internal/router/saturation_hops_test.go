package router

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// TestHopsSaturated: with prefill worker 1 and decode worker 2, a prefill
// hop's pending prefill on 1 saturates the pool (its prefill side is
// full) though 2 is idle, and a decode hop's blocks on 2 saturate it
// though 1 is idle; the all-ranks Saturated says neither. A side with no
// rank up does not count, a both-role worker gives the decode side room,
// and in an aggregated fleet HopsSaturated is Saturated.
func TestHopsSaturated(t *testing.T) {
	cfg := DefaultConfig()
	bs := cfg.BlockSize
	r, err := New(cfg, serialIndex(t), fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tokens(1, 0, 0, 64*bs)
	// Worker 1 holds a prompt's blocks easily; worker 2's KV is nearly
	// all one prompt.
	for _, w := range []WorkerInfo{{ID: 1, Role: RolePrefill, KVCapacityBlocks: 10_000}, {ID: 2, Role: RoleDecode, KVCapacityBlocks: 64 + 8}} {
		w.BlockSize = bs
		if err := r.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	th := scheduler.Thresholds{ActivePrefillTokensThreshold: 10, ActiveDecodeBlocksThreshold: 0.5}
	check := func(when string, hops, all bool) {
		t.Helper()
		if got, gotAll := r.HopsSaturated(th), r.Saturated(th); got != hops || gotAll != all {
			t.Fatalf("%s: HopsSaturated %v, Saturated %v; want %v, %v", when, got, gotAll, hops, all)
		}
		if r.PoolSaturated("any", th) != hops {
			t.Fatalf("%s: PoolSaturated is not HopsSaturated", when)
		}
	}
	check("idle", false, false)
	if _, err := r.Route(Request{ID: "p", Tokens: prompt, ExpectedOutputTokens: 1, Phase: PhasePrefill}); err != nil {
		t.Fatal(err)
	}
	check("prefill hop booked on the prefill worker", true, false)
	if r.HopsSaturated(scheduler.Thresholds{ActiveDecodeBlocksThreshold: 0.5}) {
		t.Fatal("the KV threshold alone saturates the prefill side holding 64 of 10,000 blocks")
	}
	r.Free("p")
	check("prefill hop freed", false, false)
	if _, err := r.Route(Request{ID: "d", Tokens: prompt, Phase: PhaseDecode}); err != nil {
		t.Fatal(err)
	}
	check("decode hop booked on the decode worker", true, false)
	if r.HopsSaturated(scheduler.Thresholds{ActivePrefillTokensThreshold: 10}) {
		t.Fatal("the prefill threshold alone saturates the decode side, which books no prefill for a decode hop")
	}
	if err := r.AddWorker(WorkerInfo{ID: 3, BlockSize: bs, Role: RoleBoth, KVCapacityBlocks: 10_000}); err != nil {
		t.Fatal(err)
	}
	check("an idle both-role worker beside the full decode worker", false, false)
	r.RemoveWorker(3)
	r.SetDown(2, true)
	check("the full decode worker down: no decode side up", false, false)
	r.SetDown(2, false)
	r.Free("d")
	check("decode hop freed", false, false)
	if r.HopsSaturated(scheduler.Thresholds{}) {
		t.Fatal("saturated with no threshold set")
	}

	// Aggregated: HopsSaturated is Saturated.
	agg := newRouter(t, cfg, serialIndex(t), 2)
	pt := scheduler.Thresholds{ActivePrefillTokensThreshold: 10}
	for i, id := range []string{"a", "b"} {
		if agg.HopsSaturated(pt) != agg.Saturated(pt) {
			t.Fatalf("aggregated, %d busy: HopsSaturated %v, Saturated %v", i, agg.HopsSaturated(pt), agg.Saturated(pt))
		}
		if _, err := agg.Route(Request{ID: id, Tokens: tokens(2, i, 0, 256), PinnedWorker: kvevent.WorkerID(i + 1), HasPinned: true}); err != nil {
			t.Fatal(err)
		}
	}
	if !agg.HopsSaturated(pt) || !agg.Saturated(pt) {
		t.Fatal("aggregated, both workers busy: not saturated")
	}
}
