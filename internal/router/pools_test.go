package router

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

func newPools(t *testing.T, idx Index) *Pools {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 3
	p, err := NewPools("model-a", cfg, idx, fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func addWorkers(t *testing.T, p *Pools, model string, bs int, ids ...kvevent.WorkerID) {
	t.Helper()
	for _, id := range ids {
		if err := p.AddWorker(model, WorkerInfo{ID: id, BlockSize: bs}); err != nil {
			t.Fatal(err)
		}
	}
}

func candidateIDs(d Decision) []kvevent.WorkerID {
	var ids []kvevent.WorkerID
	for _, c := range d.Candidates {
		ids = append(ids, c.Worker.ID)
	}
	slices.Sort(ids)
	return ids
}

// Two models with different block sizes in one router: each request is
// scored and placed only among its model's workers, with its model's
// block size, although both models' workers cache the same token ids.
func TestPoolsTwoModelsTwoBlockSizes(t *testing.T) {
	idx := serialIndex(t)
	p := newPools(t, idx)
	addWorkers(t, p, "", 16, 1, 2)        // the default model, block size 16
	addWorkers(t, p, "model-b", 32, 3, 4) // made by its first worker: block size 32
	if got := p.Models(); !slices.Equal(got, []string{"model-a", "model-b"}) {
		t.Fatalf("models %v", got)
	}
	toks := tokens(1, 1, 0, 256)
	for _, s := range []struct {
		w  kvevent.WorkerID
		bs int
	}{{2, 16}, {3, 32}, {4, 16}} { // worker 4 (model-b) holds model-a-sized blocks of the same ids
		ev, _ := storeEvent(kvevent.WorkerRank{ID: s.w}, toks, s.bs, 0)
		if err := p.ApplyEvent(ev); err != nil {
			t.Fatal(err)
		}
	}

	da, err := p.Route(Request{ID: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if got := candidateIDs(da); !slices.Equal(got, []kvevent.WorkerID{1, 2}) {
		t.Fatalf("model-a candidates %v, want [1 2]", got)
	}
	if da.Worker.ID != 2 || da.OverlapBlocks != 256/16 || da.Blocks != 16 {
		t.Fatalf("model-a: worker %d, overlap %d of %d blocks; want worker 2 with 16 of 16", da.Worker.ID, da.OverlapBlocks, da.Blocks)
	}
	db, err := p.Route(Request{ID: "b", Model: "model-b", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if got := candidateIDs(db); !slices.Equal(got, []kvevent.WorkerID{3, 4}) {
		t.Fatalf("model-b candidates %v, want [3 4]", got)
	}
	if db.Worker.ID != 3 || db.OverlapBlocks != 256/32 || db.Blocks != 8 {
		t.Fatalf("model-b: worker %d, overlap %d of %d blocks; want worker 3 with 8 of 8", db.Worker.ID, db.OverlapBlocks, db.Blocks)
	}
	for _, c := range db.Candidates {
		if c.Worker.ID == 4 && c.Overlap.Device != 0 {
			t.Fatalf("worker 4's 16-token blocks scored for a 32-token model: %+v", c)
		}
	}
	if _, err := p.Route(Request{ID: "c", Model: "model-c", Tokens: toks}); !errors.Is(err, ErrUnknownModel) || !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("unknown model: %v", err)
	}
	// A worker whose block size differs from its model's pool is refused.
	if err := p.AddWorker("model-b", WorkerInfo{ID: 9, BlockSize: 16}); !errors.Is(err, ErrBlockSizeMismatch) {
		t.Fatalf("block size 16 in model-b's pool: %v", err)
	}

	// Free finds each request's pool.
	if st := p.Stats(); st.Routed != 2 {
		t.Fatalf("routed %d, want 2", st.Routed)
	}
	if !p.Free("b") || !p.Free("a") {
		t.Fatal("Free did not find a booked request")
	}
	if p.Free("a") {
		t.Fatal("a second Free succeeded")
	}
	for _, l := range p.Loads() {
		if l.ActiveRequests != 0 {
			t.Fatalf("%v still busy after Free: %+v", l.Worker, l)
		}
	}
	if n := len(p.reqs); n != 0 {
		t.Fatalf("%d request ids remembered after their Free", n)
	}
}

// A worker that restarts serving another model leaves its old pool: its
// running requests and cached blocks go, and only the new model's
// requests reach it.
func TestPoolsWorkerSwitchesModel(t *testing.T) {
	idx := serialIndex(t)
	p := newPools(t, idx)
	addWorkers(t, p, "", 16, 1, 2)
	addWorkers(t, p, "model-b", 16, 3)
	toks := tokens(2, 1, 0, 128)
	ev, _ := storeEvent(kvevent.WorkerRank{ID: 1}, toks, 16, 0)
	if err := p.ApplyEvent(ev); err != nil {
		t.Fatal(err)
	}
	d, err := p.Route(Request{ID: "r1", Tokens: toks})
	if err != nil || d.Worker.ID != 1 || d.OverlapBlocks != 8 {
		t.Fatalf("before the switch: %+v, %v", d.Worker, err)
	}
	local, _ := kvhash.LocalHashes(toks, kvhash.Options{BlockSize: 16}, nil)
	var sc index.Scores
	idx.Query(local, &sc)
	if len(sc.List) != 1 || sc.List[0].Worker.ID != 1 {
		t.Fatalf("index before the switch: %+v", sc.List)
	}

	// Worker 1 comes back serving model-b.
	if err := p.AddWorker("model-b", WorkerInfo{ID: 1, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	if m, _ := p.ModelOf(1); m != "model-b" {
		t.Fatalf("worker 1 in %q", m)
	}
	idx.Query(local, &sc)
	if len(sc.List) != 0 {
		t.Fatalf("worker 1's model-a blocks survived its switch: %+v", sc.List)
	}
	for _, l := range p.Loads() {
		if l.ActiveRequests != 0 {
			t.Fatalf("%v keeps a model-a request after the switch: %+v", l.Worker, l)
		}
	}
	da, err := p.Plan(Request{ID: "r2", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if got := candidateIDs(da); !slices.Equal(got, []kvevent.WorkerID{2}) {
		t.Fatalf("model-a candidates after the switch %v, want [2]", got)
	}
	db, err := p.Plan(Request{ID: "r3", Model: "model-b", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if got := candidateIDs(db); !slices.Equal(got, []kvevent.WorkerID{1, 3}) {
		t.Fatalf("model-b candidates after the switch %v, want [1 3]", got)
	}
	if err := p.RemoveWorker(1); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.ModelOf(1); ok {
		t.Fatal("removed worker still has a model")
	}
	if p.SetDown(1, true) {
		t.Fatal("SetDown found a removed worker")
	}
}

// Pools made for workers go with their last worker, and their number is
// bounded: a worker cycling through model names, or many workers each
// naming its own model, cannot grow the router without bound.
func TestPoolsBounded(t *testing.T) {
	p := newPools(t, serialIndex(t))
	addWorkers(t, p, "", 16, 1)
	for i := range 3000 {
		if err := p.AddWorker(fmt.Sprint("model-", i), WorkerInfo{ID: 2, BlockSize: 16}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Models(); !slices.Equal(got, []string{"model-2999", "model-a"}) {
		t.Fatalf("after cycling: %d pools %v", len(got), got[:min(len(got), 5)])
	}
	if err := p.RemoveWorker(2); err != nil {
		t.Fatal(err)
	}
	if got := p.Models(); !slices.Equal(got, []string{"model-a"}) {
		t.Fatalf("after the last worker left: %v", got)
	}
	var err error
	for i := 0; err == nil && i < 2*MaxPools; i++ {
		err = p.AddWorker(fmt.Sprint("own-", i), WorkerInfo{ID: kvevent.WorkerID(100 + i), BlockSize: 16})
	}
	if !errors.Is(err, ErrTooManyModels) || len(p.Models()) != MaxPools {
		t.Fatalf("%d pools, last error %v", len(p.Models()), err)
	}
	// The default model's pool stays even without workers.
	if err := p.RemoveWorker(1); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Pool(""); !ok {
		t.Fatal("the default pool went with its last worker")
	}
}

// PrefillModel gives one rank's prefill facts from its own pool, as the
// fleet-wide TimeModels and Workers give them: before any sample the
// prior, then the fitted polynomial; the worker's max batched tokens and
// its pool's block size; false for a worker in no pool.
func TestPrefillModelFromItsPool(t *testing.T) {
	p := newPools(t, serialIndex(t))
	if err := p.AddWorker("", WorkerInfo{ID: 1, BlockSize: 16, MaxBatchedTokens: 4096}); err != nil {
		t.Fatal(err)
	}
	if err := p.AddWorker("model-b", WorkerInfo{ID: 2, BlockSize: 32, MaxBatchedTokens: 2048}); err != nil {
		t.Fatal(err)
	}
	w2 := kvevent.WorkerRank{ID: 2}
	if pm, ok := p.PrefillModel(w2); !ok || pm.Prefill != timemodel.PriorPrefill || pm.MaxBatchedTokens != 2048 || pm.BlockSize != 32 {
		t.Fatalf("cold worker 2: %+v %v", pm, ok)
	}
	for s := range 30 {
		n := 500 + 100*(s%10)
		p.Observe(w2, Sample{PromptTokens: n, TTFT: time.Duration(3 * timemodel.PriorPrefillMs(n) * float64(time.Millisecond))}, t0.Add(time.Duration(s)*time.Second))
	}
	ms := p.TimeModels()
	if len(ms) != 1 || ms[0].Worker != w2 || ms[0].Prefill == timemodel.PriorPrefill {
		t.Fatalf("time models %+v", ms)
	}
	if pm, ok := p.PrefillModel(w2); !ok || pm.Prefill != ms[0].Prefill {
		t.Fatalf("worker 2 after samples: %+v, time models say %+v", pm, ms[0].Prefill)
	}
	if pm, ok := p.PrefillModel(kvevent.WorkerRank{ID: 1}); !ok || pm.Prefill != timemodel.PriorPrefill || pm.MaxBatchedTokens != 4096 || pm.BlockSize != 16 {
		t.Fatalf("worker 1: %+v %v", pm, ok)
	}
	if _, ok := p.PrefillModel(kvevent.WorkerRank{ID: 9}); ok {
		t.Fatal("a worker in no pool has a prefill model")
	}
	if _, ok := p.PrefillModel(kvevent.WorkerRank{ID: 1, Rank: 3}); ok {
		t.Fatal("a rank the worker does not have has a prefill model")
	}
}
