package index

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

var t0 = time.Unix(1_700_000_000, 0)

func TestRecordTTLAndRefresh(t *testing.T) {
	x := mustNew(t, DefaultConfig()) // TTL 120 s
	if err := x.Record(w1, []uint64{1, 2, 3}, t0); err != nil {
		t.Fatal(err)
	}
	if got := score(x, w1, 1, 2, 3, 4).Blocks; got != 3 {
		t.Fatalf("score %d, want 3", got)
	}
	// Re-record the first two at +100 s: they live until +220 s; block 3 until +120 s.
	_ = x.Record(w1, []uint64{1, 2}, t0.Add(100*time.Second))
	x.Expire(t0.Add(119 * time.Second))
	if got := score(x, w1, 1, 2, 3).Blocks; got != 3 {
		t.Fatalf("before expiry: %d, want 3", got)
	}
	x.Expire(t0.Add(120 * time.Second))
	if got := score(x, w1, 1, 2, 3).Blocks; got != 2 {
		t.Fatalf("after block 3 expiry: %d, want 2", got)
	}
	x.Expire(t0.Add(220 * time.Second))
	if got := score(x, w1, 1, 2, 3).Blocks; got != 0 {
		t.Fatalf("after all expiry: %d, want 0", got)
	}
	if s := x.Stats(); s.Nodes != 0 || s.Expired != 3 || x.approx.entries != 0 {
		t.Fatalf("stats %+v entries %d", s, x.approx.entries)
	}
}

func TestRecordSizeCapPrunesEarliestThenShallowest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ApproxMaxBlocks = 10
	cfg.PruneRatio = 0.8
	x := mustNew(t, cfg)
	_ = x.Record(w1, []uint64{1, 2, 3, 4}, t0)                  // expires first
	_ = x.Record(w2, []uint64{1, 2, 3, 4}, t0.Add(time.Second)) // then this
	_ = x.Record(w1, []uint64{9, 8, 7}, t0.Add(2*time.Second))  // 11 entries > 10: prune to 8
	// Earliest expiry: w1's chain [1..4]; the shallowest of it goes first,
	// which takes its whole chain (prefix semantics): 4 entries -> 7 left.
	if got := score(x, w1, 1, 2, 3, 4).Blocks; got != 0 {
		t.Fatalf("w1 old chain: %d, want 0", got)
	}
	if got := score(x, w2, 1, 2, 3, 4).Blocks; got != 4 {
		t.Fatalf("w2 chain: %d, want 4", got)
	}
	if got := score(x, w1, 9, 8, 7).Blocks; got != 3 {
		t.Fatalf("w1 new chain: %d, want 3", got)
	}
	if s := x.Stats(); s.Pruned != 4 || s.Entries != 7 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPredictTakesPerWorkerMax(t *testing.T) {
	x := mustNew(t, DefaultConfig()) // PredictTTL 5 s
	_ = apply(t, x, chain(w1, 0, 100, 1, 2))
	_ = x.Predict(w1, []uint64{1, 2, 3, 4}, t0)
	_ = x.Predict(w2, []uint64{1}, t0)
	var s Scores
	x.Query([]uint64{1, 2, 3, 4}, &s)
	if len(s.List) != 2 {
		t.Fatalf("want one score per worker, got %+v", s.List)
	}
	if g := s.Get(w1); g.Blocks != 4 || g.Indexed != 2 {
		t.Fatalf("w1 %+v, want predicted 4 blocks, 2 indexed", g)
	}
	// The real stored event overtakes the prediction.
	_ = apply(t, x, chain(w1, 101, 102, 3, 4, 5))
	x.Query([]uint64{1, 2, 3, 4, 5}, &s)
	if g := s.Get(w1); g.Blocks != 5 {
		t.Fatalf("w1 %+v, want exact 5", g)
	}
	x.Expire(t0.Add(5 * time.Second))
	x.Query([]uint64{1, 2, 3, 4, 5}, &s)
	if g := s.Get(w1); g.Blocks != 5 || len(s.List) != 1 {
		t.Fatalf("after expiry %+v", s.List)
	}
	// Predictions are not dumped; exact blocks are.
	if d := x.Dump(); len(d) != 5 {
		t.Fatalf("dump has %d events, want 5", len(d))
	}
}

func TestApproxAndExactCoexist(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	_ = apply(t, x, chain(w1, 0, 100, 1, 2, 3))
	_ = x.Record(w2, []uint64{1, 2}, t0)
	var s Scores
	x.Query([]uint64{1, 2, 3}, &s)
	if s.Get(w1).Blocks != 3 || s.Get(w2).Blocks != 2 {
		t.Fatalf("scores %+v", s.List)
	}
	x.RemoveWorker(w2.ID)
	x.Query([]uint64{1, 2, 3}, &s)
	if s.Get(w2).Blocks != 0 || s.Get(w1).Blocks != 3 {
		t.Fatalf("after removal %+v", s.List)
	}
	_ = kvevent.WorkerRank{}
}

// A removed worker's expiry items stay in the heap; a new holder reusing
// its id can record, at the same instant, a run whose leaf reuses the old
// leaf's node at another depth. The stale item must then expire the whole
// new run, not only its bottom (found by TestApproxAndPredictMatchModel).
func TestStaleExpiryItemOfRemovedWorker(t *testing.T) {
	x := mustNew(t, DefaultConfig())  // TTL 120 s
	_ = x.Record(w1, []uint64{5}, t0) // w1's holder id 1, node 1 at depth 0
	if err := apply(t, x, chain(w2, 0, 100, 3)); err != nil {
		t.Fatal(err)
	}
	x.RemoveWorker(w1.ID) // frees holder id 1 and node 1; its item stays
	// Node [3] exists; [3 4] takes the freed node 1, at depth 1.
	_ = x.Record(w1, []uint64{3, 4}, t0)
	if got := score(x, w1, 3, 4).Blocks; got != 2 {
		t.Fatalf("recorded score %d, want 2", got)
	}
	x.Expire(t0.Add(120 * time.Second))
	if got := x.Indexed(w1); got != 0 {
		t.Fatalf("after expiry w1 still has %d indexed blocks, want 0", got)
	}
	if got := score(x, w1, 3, 4).Blocks; got != 0 {
		t.Fatalf("after expiry w1 scores %d, want 0", got)
	}
	if got := score(x, w2, 3, 4).Blocks; got != 1 {
		t.Fatalf("w2 scores %d, want 1", got)
	}
}
