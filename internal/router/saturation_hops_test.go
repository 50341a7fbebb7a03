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

// TestWorkersSaturated: in an aggregated pool of workers 1, 2 and 3, a
// prompt pending on worker 1 saturates the set {1} (and {1} with an
// unknown worker) while the sets {2}, {1, 2} and the whole pool have
// room; with 2 busy too {1, 2} is saturated and the pool is not (3 is
// idle). Down workers do not count: {1, 2} with 1 down is judged by 2, a
// set with no worker up is not saturated, nor is a set of unknown
// workers; an empty set is the whole pool (HopsSaturated), and no
// threshold saturates nothing.
func TestWorkersSaturated(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 3)
	th := scheduler.Thresholds{ActivePrefillTokensThreshold: 10}
	type set = []kvevent.WorkerID
	check := func(when string, want map[string]bool, sets map[string]set) {
		t.Helper()
		for name, s := range sets {
			if got := r.WorkersSaturated("any", th, s); got != want[name] {
				t.Fatalf("%s: WorkersSaturated(%s = %v) %v, want %v", when, name, s, got, want[name])
			}
		}
		if r.WorkersSaturated("any", th, nil) != r.HopsSaturated(th) {
			t.Fatalf("%s: the empty set is not the whole pool", when)
		}
	}
	sets := map[string]set{"{1}": {1}, "{1,99}": {1, 99}, "{2}": {2}, "{1,2}": {1, 2}, "{99}": {99}, "{}": nil}
	check("idle", map[string]bool{}, sets)
	busy := func(id string, w kvevent.WorkerID) {
		t.Helper()
		if _, err := r.Route(Request{ID: id, Tokens: tokens(3, int(w), 0, 256), PinnedWorker: w, HasPinned: true}); err != nil {
			t.Fatal(err)
		}
	}
	busy("a", 1)
	check("1 busy", map[string]bool{"{1}": true, "{1,99}": true}, sets)
	busy("b", 2)
	check("1 and 2 busy", map[string]bool{"{1}": true, "{1,99}": true, "{2}": true, "{1,2}": true}, sets)
	r.SetDown(1, true)
	check("1 down, 2 busy", map[string]bool{"{2}": true, "{1,2}": true}, sets)
	r.SetDown(1, false)
	r.Free("b")
	check("2 freed", map[string]bool{"{1}": true, "{1,99}": true}, sets)
	if r.WorkersSaturated("any", scheduler.Thresholds{}, set{1}) {
		t.Fatal("saturated with no threshold set")
	}
}

// TestWorkersSaturatedPerHop: with prefill worker 1 and decode workers 2
// and 3, a decode hop's blocks on 2 saturate the set {1, 2} (its decode
// side is full) but not {1, 3} nor the pool; a prefill hop pending on 1
// saturates {1, 3} but not {2, 3}, which has no prefill side (a side
// with no allowed worker up does not count).
func TestWorkersSaturatedPerHop(t *testing.T) {
	cfg := DefaultConfig()
	bs := cfg.BlockSize
	r, err := New(cfg, serialIndex(t), fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []WorkerInfo{{ID: 1, Role: RolePrefill, KVCapacityBlocks: 10_000}, {ID: 2, Role: RoleDecode, KVCapacityBlocks: 64 + 8},
		{ID: 3, Role: RoleDecode, KVCapacityBlocks: 64 + 8}} {
		w.BlockSize = bs
		if err := r.AddWorker(w); err != nil {
			t.Fatal(err)
		}
	}
	th := scheduler.Thresholds{ActivePrefillTokensThreshold: 10, ActiveDecodeBlocksThreshold: 0.5}
	prompt := tokens(4, 0, 0, 64*bs)
	if _, err := r.Route(Request{ID: "d", Tokens: prompt, Phase: PhaseDecode, PinnedWorker: 2, HasPinned: true}); err != nil {
		t.Fatal(err)
	}
	if !r.WorkersSaturated("", th, []kvevent.WorkerID{1, 2}) || r.WorkersSaturated("", th, []kvevent.WorkerID{1, 3}) || r.HopsSaturated(th) {
		t.Fatalf("decode hop on 2: {1,2} %v, {1,3} %v, pool %v; want true, false, false",
			r.WorkersSaturated("", th, []kvevent.WorkerID{1, 2}), r.WorkersSaturated("", th, []kvevent.WorkerID{1, 3}), r.HopsSaturated(th))
	}
	r.Free("d")
	if _, err := r.Route(Request{ID: "p", Tokens: prompt, ExpectedOutputTokens: 1, Phase: PhasePrefill}); err != nil {
		t.Fatal(err)
	}
	if !r.WorkersSaturated("", th, []kvevent.WorkerID{1, 3}) || r.WorkersSaturated("", th, []kvevent.WorkerID{2, 3}) {
		t.Fatalf("prefill hop on 1: {1,3} %v, {2,3} %v; want true, false",
			r.WorkersSaturated("", th, []kvevent.WorkerID{1, 3}), r.WorkersSaturated("", th, []kvevent.WorkerID{2, 3}))
	}
}
