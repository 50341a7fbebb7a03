package router

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// TestPoolsPoolSaturated: with the default model's only worker holding a
// prompt of 256 pending prefill tokens (over a threshold of 10), its pool
// is saturated (named "" or by its name) while model-b's idle pool is
// not, and the fleet-wide Saturated is not; once model-b's worker holds
// one too, both are; freeing the first clears its pool only. A model
// with no pool is never saturated; a single Router is its one pool.
func TestPoolsPoolSaturated(t *testing.T) {
	p := newPools(t, serialIndex(t))
	addWorkers(t, p, "", 16, 1)
	addWorkers(t, p, "model-b", 16, 2)
	th := scheduler.Thresholds{ActivePrefillTokensThreshold: 10}
	check := func(when string, a, b, all bool) {
		t.Helper()
		if got := [...]bool{p.PoolSaturated("", th), p.PoolSaturated("model-a", th), p.PoolSaturated("model-b", th), p.Saturated(th)}; got != [...]bool{a, a, b, all} {
			t.Fatalf("%s: default %v, model-a %v, model-b %v, fleet %v; want %v %v %v %v", when, got[0], got[1], got[2], got[3], a, a, b, all)
		}
	}
	check("idle", false, false, false)
	if _, err := p.Route(Request{ID: "a", Tokens: tokens(1, 1, 0, 256)}); err != nil {
		t.Fatal(err)
	}
	check("model-a's worker busy", true, false, false)
	if _, err := p.Route(Request{ID: "b", Model: "model-b", Tokens: tokens(2, 1, 0, 256)}); err != nil {
		t.Fatal(err)
	}
	check("both busy", true, true, true)
	p.Free("a")
	check("model-a's request freed", false, true, false)
	if p.PoolSaturated("model-c", th) {
		t.Fatal("a model with no pool is saturated")
	}
	r, _ := p.Pool("model-b")
	if !r.PoolSaturated("anything", th) || r.PoolSaturated("anything", scheduler.Thresholds{}) {
		t.Fatal("a Router's PoolSaturated is not its Saturated")
	}
}

// TestPoolsWorkersSaturated: the default model's pool has workers 1 and
// 2, model-b's worker 3. With a prompt pending on 1, the default pool
// judged among {1} is saturated, among {1, 2} and whole it is not; a
// worker of another pool in the set is ignored ({1, 3} is {1}), and a
// model with no pool is not saturated.
func TestPoolsWorkersSaturated(t *testing.T) {
	p := newPools(t, serialIndex(t))
	addWorkers(t, p, "", 16, 1, 2)
	addWorkers(t, p, "model-b", 16, 3)
	th := scheduler.Thresholds{ActivePrefillTokensThreshold: 10}
	if _, err := p.Route(Request{ID: "a", Tokens: tokens(1, 1, 0, 256), PinnedWorker: 1, HasPinned: true}); err != nil {
		t.Fatal(err)
	}
	type set = []kvevent.WorkerID
	for _, c := range []struct {
		model string
		set   set
		want  bool
	}{{"", set{1}, true}, {"model-a", set{1}, true}, {"", set{1, 3}, true}, {"", set{1, 2}, false}, {"", nil, false},
		{"model-b", set{1}, false}, {"model-c", set{1}, false}} {
		if got := p.WorkersSaturated(c.model, th, c.set); got != c.want {
			t.Fatalf("WorkersSaturated(%q, %v) %v, want %v", c.model, c.set, got, c.want)
		}
	}
}
