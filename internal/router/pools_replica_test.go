package router

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Pools' replica hooks: local events name their pool ("" for the default
// model's), a pool made later is observed too, a peer's events go to the
// pool they name, a model-less Free finds the pool that books the
// request, and an unknown model is counted and dropped, making no pool.
func TestPoolsReplicaHooks(t *testing.T) {
	p := newPools(t, serialIndex(t))
	addWorkers(t, p, "", 16, 1)
	var mu sync.Mutex
	var seen []LifecycleEvent
	p.SetObserver(func(ev LifecycleEvent) { mu.Lock(); seen = append(seen, ev); mu.Unlock() })
	addWorkers(t, p, "model-b", 32, 2) // a pool made after SetObserver
	for _, r := range []Request{{ID: "a", Tokens: tokens(1, 1, 0, 64)}, {ID: "b", Model: "model-b", Tokens: tokens(1, 2, 0, 64)}} {
		if _, err := p.Route(r); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(seen) != 2 || seen[0].Model != "" || seen[1].Model != "model-b" || seen[1].Worker.ID != 2 {
		t.Fatalf("observed %+v", seen)
	}
	mu.Unlock()

	peer := func(kind LifecycleKind, id, model string, w kvevent.WorkerID) bool {
		return p.ApplyRemote(LifecycleEvent{Kind: kind, RouterID: 99, RequestID: id, Model: model, Worker: kvevent.WorkerRank{ID: w}, BlockHashes: []uint64{7}, PrefillTokens: 16})
	}
	if !peer(AddRequest, "x", "model-b", 2) {
		t.Fatal("peer booking in model-b refused")
	}
	b, _ := p.Pool("model-b")
	if !b.Booked("x") || !p.Booked("x") {
		t.Fatal("peer booking not in model-b's pool")
	}
	if peer(AddRequest, "y", "", 2) { // the default pool has no worker 2
		t.Fatal("model-less booking applied outside the default pool")
	}
	if !peer(Free, "x", "", 0) || p.Booked("x") {
		t.Fatal("model-less Free did not find model-b's booking")
	}
	before := p.Stats()
	if peer(AddRequest, "z", "model-c", 2) || peer(Free, "z", "model-c", 2) {
		t.Fatal("unknown model applied")
	}
	if got := p.Stats(); got.RemoteUnknownModel != before.RemoteUnknownModel+2 || got.RemoteDropped != before.RemoteDropped+2 {
		t.Fatalf("stats %+v after %+v", got, before)
	}
	if len(p.Models()) != 2 {
		t.Fatalf("a peer's claim made a pool: %v", p.Models())
	}
}
