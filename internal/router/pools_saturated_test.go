package router

import (
	"testing"

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
