package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/sequences"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fixedClock() time.Time { return t0 }

func serialIndex(t testing.TB) *Serial {
	t.Helper()
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return NewSerial(x)
}

func newRouter(t testing.TB, cfg Config, idx Index, workers int) *Router {
	t.Helper()
	r, err := New(cfg, idx, fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= workers; i++ {
		if err := r.AddWorker(WorkerInfo{ID: kvevent.WorkerID(i), BlockSize: cfg.BlockSize}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// tokens returns n tokens: the first shared of them from the family's
// stream, the rest unique to (family, id).
func tokens(family, id, shared, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		if i < shared {
			out[i] = uint32(family*1_000_003 + i)
		} else {
			out[i] = uint32(family*1_000_003+id*7919+i) ^ 0x5bd1e995
		}
	}
	return out
}

// storeEvent returns the stored event a worker would publish after
// computing the prompt's blocks from position `from` on.
func storeEvent(w kvevent.WorkerRank, toks []uint32, bs, from int) (kvevent.Event, bool) {
	local, seq, _ := kvhash.Hashes(toks, kvhash.Options{BlockSize: bs}, nil, nil)
	if from >= len(local) {
		return kvevent.Event{}, false
	}
	ev := kvevent.Event{Worker: w, Kind: kvevent.Stored}
	if from > 0 {
		ev.HasParent, ev.Parent = true, seq[from-1]
	}
	for i := from; i < len(local); i++ {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: seq[i], LocalHash: local[i]})
	}
	return ev, true
}

func assertIdle(t *testing.T, r *Router) {
	t.Helper()
	for _, l := range r.Loads() {
		if l != (sequences.Load{Worker: l.Worker}) {
			t.Errorf("%v not idle: %+v", l.Worker, l)
		}
	}
}

// TestHotSpot routes 1,000 requests sharing one 1,024-token system prompt
// (plus a unique 256-token question each) over 8 workers with default
// knobs. Workers publish stored events for what they compute; each request
// runs while the next 32 arrive. The load term must spread them.
func TestHotSpot(t *testing.T) {
	cfg := DefaultConfig()
	r := newRouter(t, cfg, serialIndex(t), 8)
	counts := map[kvevent.WorkerID]int{}
	var live []string
	for i := range 1000 {
		toks := tokens(1, i, 1024, 1024+256)
		id := fmt.Sprint(i)
		d, err := r.Route(Request{ID: id, Tokens: toks})
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Worker.ID]++
		if ev, ok := storeEvent(d.Worker, toks, cfg.BlockSize, d.OverlapBlocks); ok {
			if err := r.ApplyEvent(ev); err != nil {
				t.Fatal(err)
			}
		}
		r.MarkPrefillCompleted(id)
		live = append(live, id)
		if len(live) > 32 {
			r.Free(live[0])
			live = live[1:]
		}
	}
	for _, id := range live {
		r.Free(id)
	}
	assertIdle(t, r)
	var dist []int
	for w := 1; w <= 8; w++ {
		dist = append(dist, counts[kvevent.WorkerID(w)])
	}
	t.Logf("hot spot distribution over workers 1..8: %v", dist)
	if m := slices.Max(dist); m >= 1000 || m > 2*1000/8 {
		t.Fatalf("requests not spread: %v (busiest above twice the fair share)", dist)
	}
	if slices.Min(dist) == 0 {
		t.Fatalf("a worker got nothing: %v", dist)
	}
}

// TestConcurrentBookingsSeeEachOther routes 40 identical prompts from 40
// goroutines over 4 workers with no cache: each booking raises the chosen
// worker's cost, so only if every Route sees all earlier bookings do the
// workers end with exactly 10 requests each.
func TestConcurrentBookingsSeeEachOther(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 4)
	toks := tokens(2, 0, 0, 512)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, err := r.Route(Request{ID: fmt.Sprint(i), Tokens: toks}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, l := range r.Loads() {
		if l.ActiveRequests != 10 {
			t.Errorf("%v has %d requests, want 10 (loads %+v)", l.Worker, l.ActiveRequests, r.Loads())
		}
	}
}

// TestConcurrentRouteAndFree hammers one router backed by the concurrent
// index from many goroutines (route, publish events, mark, free) while
// workers come and go; afterwards every worker's load is exactly zero.
func TestConcurrentRouteAndFree(t *testing.T) {
	cc := liveindex.DefaultConfig()
	cc.Writers = 2
	x, err := liveindex.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	cfg := DefaultConfig()
	cfg.PredictOnRoute = true
	var mu sync.Mutex
	var now time.Time = t0
	r, err := New(cfg, x, func() time.Time { mu.Lock(); defer mu.Unlock(); now = now.Add(time.Millisecond); return now }, func(LifecycleEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 6; i++ {
		mode := Exact
		if i == 6 {
			mode = Approximate
		}
		if err := r.AddWorker(WorkerInfo{ID: kvevent.WorkerID(i), BlockSize: 16, DPSize: 2, Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 150 {
				toks := tokens(rng.IntN(4), rng.IntN(20), 256, 256+rng.IntN(512))
				id := fmt.Sprintf("g%d-%d", g, i)
				d, err := r.Route(Request{ID: id, Tokens: toks})
				if err != nil {
					t.Error(err)
					return
				}
				if ev, ok := storeEvent(d.Worker, toks, 16, d.OverlapBlocks); ok && rng.IntN(2) == 0 {
					_ = r.ApplyEvent(ev) // conflicts with concurrent stores are fine
				}
				if rng.IntN(3) > 0 {
					r.MarkPrefillCompleted(id)
				}
				r.Free(id)
				r.Free(id) // idempotent
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			_ = r.RemoveWorker(7)
			_ = r.AddWorker(WorkerInfo{ID: 7, BlockSize: 16})
			r.SetDown(3, true)
			r.SetDown(3, false)
		}
	})
	wg.Wait()
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	assertIdle(t, r)
	// At least the second Free of every request is unknown; requests
	// booked on worker 7 when it was removed add more.
	if st := r.Stats(); st.Routed != 8*150 || st.Sequences.UnknownIDs < 8*150 {
		t.Fatalf("stats %+v: want 1200 routed and at least 1200 unknown ids", st)
	}
}

func TestRouteErrorsAndPlan(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 2)
	toks := tokens(3, 0, 0, 64)
	d, err := r.Plan(Request{Tokens: toks})
	if err != nil || d.Booked {
		t.Fatalf("plan: %+v, %v", d, err)
	}
	assertIdle(t, r)
	if _, err := r.Route(Request{Tokens: toks}); !errors.Is(err, ErrRequest) {
		t.Fatalf("empty id: %v", err)
	}
	if _, err := r.Route(Request{ID: "a", Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(Request{ID: "a", Tokens: toks}); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate id: %v", err)
	}
	if _, err := r.Route(Request{ID: "b", Tokens: toks, AllowedWorkers: []kvevent.WorkerID{9}}); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("no candidates: %v", err)
	}
	if err := r.AddWorker(WorkerInfo{ID: 5, BlockSize: 16, DPSize: -1}); !errors.Is(err, ErrWorkerInfo) {
		t.Fatalf("bad worker info: %v", err)
	}
	if _, err := New(Config{}, serialIndex(t), fixedClock, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero config: %v", err)
	}
	if _, err := New(DefaultConfig(), nil, fixedClock, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("nil index: %v", err)
	}
}

func TestAddWorkerUpdatesRanks(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(r.AddWorker(WorkerInfo{ID: 1, BlockSize: 16, DPSize: 3}))
	_, err := r.Route(Request{ID: "x", Tokens: tokens(1, 1, 0, 32), PinnedWorker: 1, HasPinned: true, DPRankStart: 2, DPRankSize: 1})
	must(err)
	must(r.AddWorker(WorkerInfo{ID: 1, BlockSize: 16, DPStart: 0, DPSize: 2}))
	if got := len(r.Loads()); got != 2 {
		t.Fatalf("ranks after shrinking: %d, want 2", got)
	}
	if r.Free("x") {
		t.Fatal("the request on the removed rank must be gone")
	}
}

// reserveLog is an Index that records the reservations it is asked for.
type reserveLog struct {
	*Serial
	got []string
}

func (l *reserveLog) Reserve(w kvevent.WorkerRank, blocks int) error {
	l.got = append(l.got, fmt.Sprintf("%d/%d:%d", w.ID, w.Rank, blocks))
	return l.Serial.Reserve(w, blocks)
}

// TestAddWorkerReservesIndexTables checks that AddWorker asks the index to
// size every rank's table for the worker's KV capacity, capped by
// IndexReserveMaxBlocks, and asks nothing when either is 0.
func TestAddWorkerReservesIndexTables(t *testing.T) {
	cfg := DefaultConfig()
	cfg.IndexReserveMaxBlocks = 1000
	l := &reserveLog{Serial: serialIndex(t)}
	r := newRouter(t, cfg, l, 0)
	for _, info := range []WorkerInfo{
		{ID: 1, BlockSize: cfg.BlockSize, KVCapacityBlocks: 600, DPStart: 2, DPSize: 2},
		{ID: 2, BlockSize: cfg.BlockSize, KVCapacityBlocks: 5000},
		{ID: 3, BlockSize: cfg.BlockSize}, // capacity unknown
	} {
		if err := r.AddWorker(info); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"1/2:600", "1/3:600", "2/0:1000"}
	if !slices.Equal(l.got, want) {
		t.Fatalf("reservations %v, want %v", l.got, want)
	}

	cfg.IndexReserveMaxBlocks = 0
	off := &reserveLog{Serial: serialIndex(t)}
	r = newRouter(t, cfg, off, 0)
	if err := r.AddWorker(WorkerInfo{ID: 1, BlockSize: cfg.BlockSize, KVCapacityBlocks: 600}); err != nil {
		t.Fatal(err)
	}
	if len(off.got) != 0 {
		t.Fatalf("reservations with the cap at 0: %v", off.got)
	}

	cfg.IndexReserveMaxBlocks = index.MaxReserveBlocks + 1
	if err := cfg.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with cap above the index's maximum: %v", err)
	}
}

// rankPos agrees with the rank table for workers with several dp ranks
// (starting above 0 too) and refuses unknown ranks, through adds and
// removals.
func TestRankPosMatchesRanks(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 0)
	check := func() {
		t.Helper()
		for i, rk := range r.ranks {
			if p, ok := r.rankPos(rk.w); !ok || p != i {
				t.Fatalf("rankPos(%v) = %d, %v; want %d", rk.w, p, ok, i)
			}
		}
		for _, w := range []kvevent.WorkerRank{{ID: 3, Rank: 1}, {ID: 3, Rank: 9}, {ID: 99}} {
			if p, ok := r.rankPos(w); ok {
				t.Fatalf("rankPos(%v) = %d for an unknown rank", w, p)
			}
		}
	}
	for _, wi := range []WorkerInfo{
		{ID: 5, DPStart: 2, DPSize: 3}, {ID: 1}, {ID: 3, DPStart: 4, DPSize: 2}, {ID: 8, DPSize: 4},
	} {
		wi.BlockSize = DefaultConfig().BlockSize
		if err := r.AddWorker(wi); err != nil {
			t.Fatal(err)
		}
		check()
	}
	if err := r.RemoveWorker(5); err != nil {
		t.Fatal(err)
	}
	check()
	if err := r.AddWorker(WorkerInfo{ID: 8, DPStart: 1, DPSize: 2, BlockSize: DefaultConfig().BlockSize}); err != nil {
		t.Fatal(err)
	}
	check()
}
