package recovery

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// By default a rank that was not added is not followed: its events are
// dropped, counted as unknown_worker, and leave no state behind.
func TestUnknownWorkerDroppedByDefault(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	v := &lockedView{n: naive{}}
	tr, err := NewTracker(DefaultConfig(), &fakeQuerier{x: localindex.New(testWorker, 8)}, v, nil, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Add(testWorker)
	for i := range 100 {
		tr.Live(kvevent.Event{Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(500 + i)}, Kind: kvevent.Stored,
			Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 2}}}, 0)
	}
	tr.Remove(testWorker.ID)
	tr.Live(kvevent.Event{Worker: testWorker, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 2}}}, 0)
	if got := testutil.ToFloat64(m.drops.WithLabelValues(DropUnknownWorker)); got != 101 {
		t.Fatalf("dropped %v, want 100 unknown + 1 removed", got)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.ranks) != 0 || len(tr.unknown) != 0 || len(tr.removed) != 0 {
		t.Fatalf("state kept: %d ranks, %d unknown, %d removed", len(tr.ranks), len(tr.unknown), len(tr.removed))
	}
}

// AcceptUnknown follows unannounced ranks, but at most MaxUnknown of them;
// an Add makes one announced (freeing its place), a removed worker's late
// events are dropped.
func TestAcceptUnknownIsBounded(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.AcceptUnknown, cfg.MaxUnknown, cfg.RetryWait = true, 3, 10*time.Millisecond
	v := &lockedView{n: naive{}}
	tr, err := NewTracker(cfg, &fakeQuerier{x: localindex.New(testWorker, 8)}, v, nil, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	live := func(id kvevent.WorkerID) {
		tr.Live(kvevent.Event{Worker: kvevent.WorkerRank{ID: id}, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 2}}}, 0)
	}
	for id := range kvevent.WorkerID(10) {
		live(100 + id)
	}
	if n := len(tr.Workers()); n != 3 {
		t.Fatalf("%d ranks followed, want MaxUnknown = 3", n)
	}
	if got := testutil.ToFloat64(m.drops.WithLabelValues(DropUnknownLimit)); got != 7 {
		t.Fatalf("unknown_limit drops %v, want 7", got)
	}
	tr.Add(kvevent.WorkerRank{ID: 100}) // announced now: one place frees up
	live(200)
	if n := len(tr.Workers()); n != 4 {
		t.Fatalf("%d ranks followed after Add, want 4", n)
	}
	tr.Remove(101)
	live(101)
	if got := testutil.ToFloat64(m.drops.WithLabelValues(DropRemovedWorker)); got != 1 {
		t.Fatalf("removed_worker drops %v, want 1", got)
	}
}
