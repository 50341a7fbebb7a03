package indexbench

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/trace"
)

// A worked example of the simulated worker: capacity 4, chain a-b-c, then
// a-b-d-e: the shared prefix is reused, d and e are stored below b, and the
// least recently used block (c, the old chain's tail) is evicted.
func TestLRUWorkedExample(t *testing.T) {
	w := kvevent.WorkerRank{ID: 1}
	l := newLRU(w, 4)
	got := l.admit([]uint64{1, 2, 3}, []uint64{10, 20, 30})
	want := []kvevent.Event{{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 10, LocalHash: 1}, {EngineHash: 20, LocalHash: 2}, {EngineHash: 30, LocalHash: 3}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("first request (-want +got):\n%s", diff)
	}
	got = l.admit([]uint64{1, 2, 4, 5}, []uint64{10, 20, 40, 50})
	want = []kvevent.Event{
		{Worker: w, Kind: kvevent.Stored, HasParent: true, Parent: 20, Blocks: []kvevent.Block{{EngineHash: 40, LocalHash: 4}, {EngineHash: 50, LocalHash: 5}}},
		{Worker: w, Kind: kvevent.Removed, Removed: []uint64{30}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("second request (-want +got):\n%s", diff)
	}
}

// The whole stream applies to an index without a refused event, and the
// index ends with exactly the blocks the simulated caches hold.
func TestBuildStreamIsConsistent(t *testing.T) {
	reqs, err := trace.Load("synthetic")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{BlockSize: 64, Workers: 8, WorkerBlocks: 512, MaxRequests: 300}
	s, err := Build(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Ranks are the workers in order of their first event.
	var first []kvevent.WorkerRank
	seen := map[kvevent.WorkerRank]bool{}
	for _, ev := range s.Events {
		if !seen[ev.Worker] {
			seen[ev.Worker] = true
			first = append(first, ev.Worker)
		}
	}
	if diff := cmp.Diff(first, s.Ranks); diff != "" || len(s.Ranks) != s.Workers || s.WorkerBlocks != cfg.WorkerBlocks {
		t.Fatalf("ranks (-events +stream):\n%s\nworkers %d, worker blocks %d", diff, s.Workers, s.WorkerBlocks)
	}
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range s.Ranks {
		if err := x.Reserve(w, s.WorkerBlocks); err != nil {
			t.Fatal(err)
		}
	}
	for i := range s.Events {
		if err := x.Apply(&s.Events[i]); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	st := x.Stats()
	if st.Entries == 0 || st.Entries > cfg.Workers*cfg.WorkerBlocks {
		t.Fatalf("entries %d outside 1..%d", st.Entries, cfg.Workers*cfg.WorkerBlocks)
	}
	held := 0
	// Count what the simulated caches hold by replaying them again.
	ws := map[kvevent.WorkerID]map[uint64]bool{}
	for _, ev := range s.Events {
		m := ws[ev.Worker.ID]
		if m == nil {
			m = map[uint64]bool{}
			ws[ev.Worker.ID] = m
		}
		for _, b := range ev.Blocks {
			m[b.EngineHash] = true
		}
		for _, h := range ev.Removed {
			delete(m, h)
		}
	}
	for _, m := range ws {
		held += len(m)
	}
	if held != st.Entries {
		t.Fatalf("index holds %d entries, the caches %d", st.Entries, held)
	}
}

// Passes replays the rows again with new block ids: as many queries per
// pass, and no first block of a later pass equals one of the first pass.
func TestBuildPasses(t *testing.T) {
	reqs, err := trace.Load("synthetic")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{BlockSize: 64, Workers: 8, WorkerBlocks: 512, MaxRequests: 100}
	one, err := Build(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Passes = 3
	three, err := Build(reqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := len(one.Queries)
	if len(three.Queries) != 3*n {
		t.Fatalf("3 passes: %d queries, want %d", len(three.Queries), 3*n)
	}
	if diff := cmp.Diff(one.Queries, three.Queries[:n]); diff != "" {
		t.Fatalf("the first pass differs from a single pass:\n%s", diff)
	}
	firsts := map[uint64]bool{}
	for _, q := range one.Queries {
		firsts[q[0]] = true
	}
	for i, q := range three.Queries[n:] {
		if firsts[q[0]] {
			t.Fatalf("query %d of a later pass starts with a first-pass block", n+i)
		}
	}
	for _, p := range []int{-1, MaxPasses + 1} {
		if err := (Config{BlockSize: 64, Workers: 8, WorkerBlocks: 512, Passes: p}).Validate(); err == nil {
			t.Errorf("Passes %d accepted", p)
		}
	}
}
