package index

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustNew(t testing.TB, cfg Config) *Index {
	t.Helper()
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// chain builds a stored event for local hashes ls with engine hashes
// base+i, under parent (0 = root).
func chain(w kvevent.WorkerRank, parent uint64, base uint64, ls ...uint64) kvevent.Event {
	ev := kvevent.Event{Worker: w, Kind: kvevent.Stored, HasParent: parent != 0, Parent: parent}
	for i, l := range ls {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: base + uint64(i), LocalHash: l})
	}
	return ev
}

func apply(t testing.TB, x *Index, ev kvevent.Event) error {
	t.Helper()
	return x.Apply(&ev)
}

func score(x *Index, w kvevent.WorkerRank, local ...uint64) Score {
	var s Scores
	x.Query(local, &s)
	return s.Get(w)
}

var w1, w2, w1r1 = kvevent.WorkerRank{ID: 1}, kvevent.WorkerRank{ID: 2}, kvevent.WorkerRank{ID: 1, Rank: 1}

func TestStoredTwiceRemovedOnceKeeps(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	for range 2 {
		if err := apply(t, x, chain(w1, 0, 100, 11, 12)); err != nil {
			t.Fatal(err)
		}
	}
	rm := kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{101}}
	if err := apply(t, x, rm); err != nil {
		t.Fatal(err)
	}
	if got := score(x, w1, 11, 12).Blocks; got != 2 {
		t.Fatalf("after one of two removals: score %d, want 2", got)
	}
	if err := apply(t, x, rm); err != nil {
		t.Fatal(err)
	}
	if got := score(x, w1, 11, 12).Blocks; got != 1 {
		t.Fatalf("after both removals: score %d, want 1", got)
	}
}

func TestUnknownParentRefusedOthersUntouched(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w2, 0, 200, 11, 12))
	err := apply(t, x, chain(w1, 999, 100, 13))
	if !errors.Is(err, ErrUnknownParent) {
		t.Fatalf("err = %v, want ErrUnknownParent", err)
	}
	if s := x.Stats(); s.UnknownParent != 1 || s.Entries != 2 {
		t.Fatalf("stats %+v", s)
	}
	if got := score(x, w2, 11, 12).Blocks; got != 2 {
		t.Fatalf("w2 score %d, want 2", got)
	}
}

func TestUnknownRemovalAppliesRest(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 11, 12, 13))
	err := apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{555, 102, 556}})
	if !errors.Is(err, ErrUnknownBlock) {
		t.Fatalf("err = %v, want ErrUnknownBlock", err)
	}
	if got := x.Stats().UnknownRemoval; got != 2 {
		t.Fatalf("UnknownRemoval = %d, want 2", got)
	}
	if got := score(x, w1, 11, 12, 13).Blocks; got != 2 {
		t.Fatalf("score %d, want 2 (block 102 removed)", got)
	}
}

// A block removed from the middle of a chain ends the worker's score
// there, and (the documented choice) drops what the worker held below it.
func TestMiddleRemovalDropsDescendants(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 11, 12, 13, 14))
	_ = apply(t, x, chain(w2, 0, 200, 11, 12, 13, 14))
	_ = apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{101}})
	if s := score(x, w1, 11, 12, 13, 14); s.Blocks != 1 || s.Indexed != 1 {
		t.Fatalf("w1 %+v, want 1 block, 1 indexed", s)
	}
	if s := score(x, w2, 11, 12, 13, 14); s.Blocks != 4 {
		t.Fatalf("w2 %+v, want 4", s)
	}
	// Re-storing the missing block restores only that block.
	_ = apply(t, x, chain(w1, 100, 101, 12))
	if s := score(x, w1, 11, 12, 13, 14); s.Blocks != 2 {
		t.Fatalf("w1 after re-store %+v, want 2", s)
	}
	// The dropped descendants' later removals are unknown, not fatal.
	if err := apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{103}}); !errors.Is(err, ErrUnknownBlock) {
		t.Fatalf("err = %v", err)
	}
}

func TestClearedOnlyThatRankRemoveWorkerAll(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 11, 12))
	_ = apply(t, x, chain(w1r1, 0, 100, 11, 12))
	_ = apply(t, x, chain(w2, 0, 100, 11))
	_ = apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Cleared})
	if score(x, w1, 11).Blocks != 0 || score(x, w1r1, 11, 12).Blocks != 2 {
		t.Fatal("cleared must clear only rank 0")
	}
	_ = apply(t, x, chain(w1, 0, 100, 11, 12))
	x.RemoveWorker(1)
	if score(x, w1, 11).Blocks != 0 || score(x, w1r1, 11).Blocks != 0 || score(x, w2, 11).Blocks != 1 {
		t.Fatal("RemoveWorker must drop every rank of worker 1 and nothing else")
	}
	x.RemoveWorker(2)
	if s := x.Stats(); s.Nodes != 0 || s.Entries != 0 || s.Workers != 0 || x.kids.n != 0 || x.ns.xlen != 0 {
		t.Fatalf("memory not returned: %+v kids=%d xlen=%d", s, x.kids.n, x.ns.xlen)
	}
}

func TestTiersSplitOverlap(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 11, 12))
	host := chain(w1, 101, 102, 13, 14)
	host.Tier = kvevent.TierHostPinned
	if err := apply(t, x, host); err != nil {
		t.Fatal(err)
	}
	disk := chain(w1, 103, 104, 15)
	disk.Tier = kvevent.TierDisk
	if err := apply(t, x, disk); err != nil {
		t.Fatal(err)
	}
	s := score(x, w1, 11, 12, 13, 14, 15, 16)
	if s.Blocks != 5 || s.Tiers != [4]int32{2, 2, 1, 0} || s.Indexed != 5 {
		t.Fatalf("score %+v, want 5 blocks split 2/2/1", s)
	}
}

func TestConflictAndInvalid(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 11, 12))
	// Engine hash 100 reused for another position.
	if err := apply(t, x, chain(w1, 101, 100, 13)); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if err := apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Stored, HasParent: true, Parent: 5,
		Blocks: []kvevent.Block{{EngineHash: 5, LocalHash: 1}}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("self-parent err = %v", err)
	}
	if err := apply(t, x, kvevent.Event{Worker: w1, Kind: 9}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad kind err = %v", err)
	}
	if err := apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Cleared, Tier: 9}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad tier err = %v", err)
	}
	if got := score(x, w1, 11, 12, 13).Blocks; got != 2 {
		t.Fatalf("score %d, want 2", got)
	}
}

func TestBudgetEvictsLeastRecentlyMatched(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBytes = 40 * 1024
	x := mustNew(t, cfg)
	// Chain A, matched often; then many other chains push over budget.
	_ = apply(t, x, chain(w1, 0, 1, 1, 2, 3, 4))
	for i := range uint64(400) {
		score(x, w1, 1, 2, 3, 4)
		_ = apply(t, x, chain(w2, 0, 1000+10*i, 100+i, 5, 6))
	}
	s := x.Stats()
	if s.Evicted == 0 || s.Bytes > cfg.MaxBytes {
		t.Fatalf("no eviction or over budget: %+v", s)
	}
	if got := score(x, w1, 1, 2, 3, 4).Blocks; got != 4 {
		t.Fatalf("recently matched chain lost: %d", got)
	}
	// The oldest unmatched w2 chain went first.
	if got := score(x, w2, 100, 5, 6).Blocks; got != 0 {
		t.Fatalf("oldest chain kept: %d", got)
	}
	if got := score(x, w2, 499, 5, 6).Blocks; got != 3 {
		t.Fatalf("newest chain lost: %d", got)
	}
}
