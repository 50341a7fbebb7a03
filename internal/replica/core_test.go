package replica

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

type testFleet struct {
	clk     *clock
	hub     *hub
	routers []*router.Router
	cores   []*Core
}

func newFleet(t testing.TB, replicas, workers int, shadows bool) *testFleet {
	f := &testFleet{clk: &clock{now: t0}, hub: &hub{t: t}}
	for i := range replicas {
		r := newTestRouter(t, uint64(100+i), workers, f.clk.Now)
		c := NewCore(r, CoreConfig{Shadows: shadows, ShadowTTL: 10 * time.Millisecond}, f.hub.emit)
		f.routers = append(f.routers, r)
		f.cores = append(f.cores, c)
	}
	f.hub.cores = f.cores
	for _, c := range f.cores {
		for _, p := range f.cores {
			c.PeerUp(p.RouterID())
		}
	}
	return f
}

// herd sends rounds × replicas identical-prefix requests, each round one
// per replica "at the same instant" (no event delivered before the whole
// burst is routed) and returns the per-worker counts.
func herd(t *testing.T, f *testFleet, workers, rounds int) []int {
	t.Helper()
	bs, shared, n := 16, herdShared, herdLen
	for _, r := range f.routers {
		if err := r.ApplyEvent(storedEvent(t, 1, prompt(7, 0, shared, shared), bs)); err != nil {
			t.Fatal(err)
		}
	}
	counts := make([]int, workers+1)
	var ids []string
	for round := range rounds {
		for i, r := range f.routers {
			id := fmt.Sprintf("r%d-%d", i, round)
			d, err := r.Route(router.Request{ID: id, Tokens: prompt(7, round*10+i+1, shared, n)})
			if err != nil {
				t.Fatal(err)
			}
			counts[d.Worker.ID]++
			ids = append(ids, id)
		}
	}
	f.hub.flush()
	for i, id := range ids {
		f.routers[i%len(f.routers)].Free(id)
	}
	f.hub.flush()
	later := f.clk.Add(time.Second)
	for i, r := range f.routers {
		f.cores[i].Tick(later)
		if reqs, pre := loadSum(r); reqs != 0 || pre != 0 {
			t.Fatalf("router %d left with %d requests, %d prefill tokens", i, reqs, pre)
		}
	}
	return counts[1:]
}

// TestHerdingShadows shows the anti-herding mechanism: three replicas each
// route a burst of identical-prefix requests in the same instant (worker 1
// holds the 512-token prefix; prompts are 576 tokens). Without shadows each
// replica behaves as if alone and worker 1 takes (nearly) everything; with
// shadows the split is close to what a single router does with the whole
// burst. Distance is the L1 distance of the per-worker counts to the single
// router's.
func TestHerdingShadows(t *testing.T) {
	const workers = 4
	l1 := func(a, b []int) (d int) {
		for i := range a {
			d += max(a[i]-b[i], b[i]-a[i])
		}
		return d
	}
	var dWith, dWithout, maxWith, maxWithout int
	for rounds := 2; rounds <= 6; rounds++ {
		single := herd(t, newFleet(t, 1, workers, true), workers, 3*rounds)
		without := herd(t, newFleet(t, 3, workers, false), workers, rounds)
		with := herd(t, newFleet(t, 3, workers, true), workers, rounds)
		t.Logf("burst %2d (3x%d): 1 router %v | 3 replicas no shadows %v | with shadows %v", 3*rounds, rounds, single, without, with)
		if with[0] > without[0] {
			t.Errorf("burst %d: shadows put more on worker 1 (%d) than none (%d)", 3*rounds, with[0], without[0])
		}
		maxWith += slices.Max(with)
		maxWithout += slices.Max(without)
		dWith += l1(with, single)
		dWithout += l1(without, single)
	}
	t.Logf("L1 distance to the single router, summed: %d without shadows, %d with", dWithout, dWith)
	if dWith >= dWithout || maxWith >= maxWithout {
		t.Errorf("shadows should bring the split closer to the single router's and relieve the busiest worker: distance %d vs %d, busiest %d vs %d", dWith, dWithout, maxWith, maxWithout)
	}
}

// TestSplitWorkloadDrainsToZero: replicas splitting one workload, with
// events delivered as they go, agree on the load while it runs and all
// show zero once every request ends.
func TestSplitWorkloadDrainsToZero(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFleet(t, n, 4, true)
			var ids []string
			for i := range 30 {
				id := fmt.Sprintf("q%d", i)
				f.clk.Add(time.Millisecond)
				if _, err := f.routers[i%n].Route(router.Request{ID: id, Tokens: prompt(i%3, i, 64, 160)}); err != nil {
					t.Fatal(err)
				}
				f.hub.flush()
				ids = append(ids, id)
				if i%4 == 0 {
					f.routers[i%n].MarkPrefillCompleted(id)
				}
			}
			f.hub.flush()
			f.tickAll(f.clk.Add(time.Second))
			want := f.routers[0].Loads()
			for i, r := range f.routers[1:] {
				if diff := cmp.Diff(want, r.Loads()); diff != "" {
					t.Fatalf("router %d disagrees with router 0 (-0 +%d):\n%s", i+1, i+1, diff)
				}
			}
			if reqs, _ := loadSum(f.routers[0]); reqs != 30 {
				t.Fatalf("%d requests booked, want 30", reqs)
			}
			for i, id := range ids {
				f.routers[i%n].Free(id)
			}
			f.hub.flush()
			f.tickAll(f.clk.Add(time.Second))
			for i, r := range f.routers {
				if reqs, pre := loadSum(r); reqs != 0 || pre != 0 {
					t.Fatalf("router %d: %d requests, %d prefill left", i, reqs, pre)
				}
			}
		})
	}
}

func (f *testFleet) tickAll(now time.Time) {
	for _, c := range f.cores {
		c.Tick(now)
	}
}

// TestPeerDownFreesItsBookings: a replica that vanishes without freeing
// leaves no load on the survivors once it is declared gone, and its late
// events are ignored.
func TestPeerDownFreesItsBookings(t *testing.T) {
	f := newFleet(t, 3, 4, true)
	for i := range 12 {
		if _, err := f.routers[i%3].Route(router.Request{ID: fmt.Sprint("k", i), Tokens: prompt(1, i, 32, 96)}); err != nil {
			t.Fatal(err)
		}
	}
	f.hub.flush()
	dead := f.cores[2]
	dead.Detach()
	// The survivors free their own requests; the dead one never does.
	for i := range 12 {
		if i%3 != 2 {
			f.routers[i%3].Free(fmt.Sprint("k", i))
		}
	}
	f.hub.flush()
	f.tickAll(f.clk.Add(time.Second))
	if reqs, _ := loadSum(f.routers[0]); reqs != 4 {
		t.Fatalf("before the departure router 0 shows %d requests, want the dead one's 4", reqs)
	}
	for _, c := range f.cores[:2] {
		if n := c.PeerDown(dead.RouterID(), f.clk.Now()); n != 4 {
			t.Fatalf("PeerDown freed %d, want 4", n)
		}
	}
	// A late event from the departed replica is dropped.
	late := Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: dead.RouterID(), RequestID: "late", Worker: kvevent.WorkerRank{ID: 1}, PrefillTokens: 10}}
	f.cores[0].Receive(late)
	for i, r := range f.routers[:2] {
		if reqs, pre := loadSum(r); reqs != 0 || pre != 0 {
			t.Fatalf("survivor %d: %d requests, %d prefill left", i, reqs, pre)
		}
	}
	if s := f.cores[0].Stats(); s.FromDeparted != 1 || s.PeerFreed != 4 {
		t.Fatalf("stats %+v", s)
	}
}

// TestSnapshotRebuildsBookings: a late joiner applying its peers'
// snapshots sees the same load as they do, and a request freed while a
// snapshot was in flight is not resurrected (whichever arrives first).
func TestSnapshotRebuildsBookings(t *testing.T) {
	f := newFleet(t, 2, 3, false)
	for i := range 10 {
		id := fmt.Sprint("s", i)
		if _, err := f.routers[i%2].Route(router.Request{ID: id, Tokens: prompt(2, i, 48, 100), ExpectedOutputTokens: 20}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			f.routers[i%2].MarkPrefillCompleted(id)
		}
	}
	f.hub.flush()
	lateRouter := newTestRouter(t, 999, 3, f.clk.Now)
	late := NewCore(lateRouter, CoreConfig{}, nil)
	f.hub.cores = append(f.hub.cores, late)
	late.PeerUp(100) // as the membership watch reports them
	late.PeerUp(101)
	late.BeginResync(100)
	late.BeginResync(101)
	snap0 := f.cores[0].Snapshot()
	// s1 (router 1's) ends after router 0's snapshot was taken and
	// before router 1's: its Free arrives before router 1's snapshot.
	f.routers[1].Free("s1")
	snap1 := f.cores[1].Snapshot()
	// s3 (router 1's) ends after both snapshots: its Free arrives after
	// router 1's snapshot was applied.
	f.routers[1].Free("s3")
	free3 := f.hub.pending[1:]
	f.hub.pending = f.hub.pending[:1]
	f.hub.flush()
	a0, _, again0 := late.ApplySnapshot(snap0)
	a1, _, again1 := late.ApplySnapshot(snap1)
	late.EndResync(100)
	late.EndResync(101)
	if a0+a1 != 9 || again0 || again1 {
		t.Fatalf("applied %d+%d bookings (again %v %v), want 9", a0, a1, again0, again1)
	}
	f.hub.pending = free3
	f.hub.flush()
	if diff := cmp.Diff(f.routers[0].Loads(), lateRouter.Loads()); diff != "" {
		t.Fatalf("late joiner's load differs (-peer +late):\n%s", diff)
	}
	if reqs, _ := loadSum(lateRouter); reqs != 8 {
		t.Fatalf("late joiner holds %d requests, want 8", reqs)
	}
}

// TestIndexConsistency: two replicas fed the same KV events answer the
// same queries identically (every replica builds its own index).
func TestIndexConsistency(t *testing.T) {
	clk := &clock{now: t0}
	a := newTestRouter(t, 1, 4, clk.Now)
	b := newTestRouter(t, 2, 4, clk.Now)
	var evs []kvevent.Event
	for w := 1; w <= 4; w++ {
		for fam := range 5 {
			if (w+fam)%2 == 0 {
				evs = append(evs, storedEvent(t, kvevent.WorkerID(w), prompt(fam, 0, 64*(fam+1), 64*(fam+1)), 16))
			}
		}
	}
	for _, ev := range evs {
		if err := a.ApplyEvent(ev); err != nil {
			t.Fatal(err)
		}
		if err := b.ApplyEvent(ev); err != nil {
			t.Fatal(err)
		}
	}
	for fam := range 6 {
		req := router.Request{Tokens: prompt(fam, 9, 64*(fam+1), 64*(fam+1)+40)}
		da, ea := a.Plan(req)
		db, eb := b.Plan(req)
		if (ea == nil) != (eb == nil) {
			t.Fatalf("family %d: errors %v / %v", fam, ea, eb)
		}
		if diff := cmp.Diff(overlaps(da), overlaps(db)); diff != "" {
			t.Fatalf("family %d: overlaps differ:\n%s", fam, diff)
		}
		if fam < 5 && slices.Max(overlaps(da)) == 0 {
			t.Fatalf("family %d: no overlap at all (test would not detect a difference)", fam)
		}
	}
}

func overlaps(d router.Decision) []int {
	out := make([]int, len(d.Candidates))
	for i, c := range d.Candidates {
		out[i] = c.Overlap.Device
	}
	return out
}

var herdShared, herdLen = 512, 576

// TestPruneAndReturn: peers' requests the ledger expired are forgotten by
// Prune; a replica declared gone that announces itself again is reported
// as returned (its bookings must be fetched again).
func TestPruneAndReturn(t *testing.T) {
	clk := &clock{now: t0}
	x, _ := index.New(index.DefaultConfig())
	cfg := router.DefaultConfig()
	cfg.RouterID = 1
	cfg.Sequences.Expiry = time.Minute
	r, err := router.New(cfg, router.NewSerial(x), clk.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(router.WorkerInfo{ID: 1, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	c := NewCore(r, CoreConfig{}, nil)
	c.PeerUp(2)
	c.Receive(Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 2, RequestID: "old", Worker: kvevent.WorkerRank{ID: 1}, PrefillTokens: 5}})
	if n := c.Prune(); n != 0 {
		t.Fatalf("pruned %d live requests", n)
	}
	clk.Add(2 * time.Minute)
	r.Sweep()
	if n := c.Prune(); n != 1 {
		t.Fatalf("pruned %d, want the expired one", n)
	}
	if c.PeerUp(2) {
		t.Fatal("a live peer reported as returned")
	}
	c.PeerDown(2, clk.Now())
	if !c.PeerUp(2) {
		t.Fatal("a departed peer coming back not reported")
	}
}
