package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/router"
)

// pair is a sender replica (a) whose events reach a receiver replica (b)
// through a hub the test controls; shadows are off so that b's load is
// exactly a's bookings as b knows them.
type pair struct {
	clk    *clock
	hub    *hub
	ra, rb *router.Router
	a, b   *Core
}

func newPair(t testing.TB) *pair {
	p := &pair{clk: &clock{now: t0}, hub: &hub{t: t}}
	p.ra = newTestRouter(t, 1, 3, p.clk.Now)
	p.rb = newTestRouter(t, 2, 3, p.clk.Now)
	p.a = NewCore(p.ra, CoreConfig{Epoch: 5}, p.hub.emit)
	p.b = NewCore(p.rb, CoreConfig{Epoch: 7}, p.hub.emit)
	p.hub.cores = []*Core{p.b}
	p.a.PeerUp(2)
	p.b.PeerUp(1)
	return p
}

func (p *pair) route(t testing.TB, id string, i int) {
	t.Helper()
	if _, err := p.ra.Route(router.Request{ID: id, Tokens: prompt(i%3, i, 32, 80+16*(i%4)), ExpectedOutputTokens: 8}); err != nil {
		t.Fatal(err)
	}
}

// resync runs one snapshot round trip with nothing in flight.
func (p *pair) resync() (added, freed int, again bool) {
	p.b.BeginResync(1)
	defer p.b.EndResync(1)
	return p.b.ApplySnapshot(p.a.Snapshot())
}

// agree fails unless b's load is exactly a's (a's own ledger is the
// truth: b books nothing itself).
func (p *pair) agree(t testing.TB, when string) {
	t.Helper()
	if diff := cmp.Diff(p.ra.Loads(), p.rb.Loads()); diff != "" {
		t.Fatalf("%s: receiver's load differs from the sender's (-sender +receiver):\n%s", when, diff)
	}
}

// TestLostFreeDetectedAndReconciled: Frees lost in an outage leave
// phantom bookings on the receiver; the sender's next event reveals the
// hole (Receive asks for a resync) and the snapshot frees exactly the
// phantoms. A stale redelivery is then dropped.
func TestLostFreeDetectedAndReconciled(t *testing.T) {
	p := newPair(t)
	for i := range 8 {
		p.route(t, fmt.Sprint("r", i), i)
	}
	p.ra.MarkPrefillCompleted("r0")
	p.hub.flush()
	p.agree(t, "before the outage")
	p.hub.drop = func(Event) bool { return true } // outage
	for i := range 5 {
		p.ra.Free(fmt.Sprint("r", i))
	}
	p.hub.flush()
	if n, _ := loadSum(p.rb); n != 8 {
		t.Fatalf("receiver holds %d bookings during the outage, want the 8 phantoms", n)
	}
	p.hub.drop = nil
	if len(p.hub.resyncs) != 0 {
		t.Fatalf("resync asked for before any hole was visible: %v", p.hub.resyncs)
	}
	p.ra.MarkPrefillCompleted("r5") // the next event shows the hole
	saved := slices.Clone(p.hub.pending)
	p.hub.flush()
	if want := []string{"2<-1"}; !slices.Equal(p.hub.resyncs, want) {
		t.Fatalf("resyncs asked %v, want %v", p.hub.resyncs, want)
	}
	added, freed, again := p.resync()
	if added != 0 || freed != 5 || again {
		t.Fatalf("resync added %d, freed %d, again %v; want 0, 5, false", added, freed, again)
	}
	p.agree(t, "after the resync")
	p.hub.pending = saved // a duplicate delivery is stale
	p.hub.flush()
	if s := p.b.Stats(); s.Stale != 1 || s.Gaps != 1 || s.ResyncFreed != 5 {
		t.Fatalf("stats %+v: want 1 stale, 1 gap, 5 freed by resync", s)
	}
	p.agree(t, "after the duplicate")
}

// TestRestartedPeerReplaced: a peer that restarts under the same id (a
// larger epoch) without its predecessor being declared gone: its first
// event asks for a resync, which frees the predecessor's bookings; events
// of the old incarnation arriving late are stale.
func TestRestartedPeerReplaced(t *testing.T) {
	p := newPair(t)
	for i := range 4 {
		p.route(t, fmt.Sprint("old", i), i)
	}
	p.hub.flush()
	p.a.Detach()
	p.ra = newTestRouter(t, 1, 3, p.clk.Now)
	p.a = NewCore(p.ra, CoreConfig{Epoch: 6}, p.hub.emit)
	p.route(t, "new0", 0)
	p.hub.flush()
	if want := []string{"2<-1"}; !slices.Equal(p.hub.resyncs, want) {
		t.Fatalf("resyncs asked %v, want %v", p.hub.resyncs, want)
	}
	if _, freed, again := p.resync(); freed != 4 || again {
		t.Fatalf("freed %d (again %v), want the predecessor's 4", freed, again)
	}
	p.agree(t, "after the restart")
	if resync := p.b.Receive(Event{LifecycleEvent: router.LifecycleEvent{Kind: router.Free, RouterID: 1, RequestID: "new0"}, Epoch: 5, Seq: 99}); resync {
		t.Fatal("an old incarnation's event asked for a resync")
	}
	p.agree(t, "after a late event of the predecessor")
}

// TestClaimRevealsLostTail: when a peer's last events are all lost no
// later event shows the hole; its claimed position (snapshot requests
// carry it) does, once the grace has passed, unless the events arrive.
func TestClaimRevealsLostTail(t *testing.T) {
	p := newPair(t)
	p.route(t, "a", 0)
	p.hub.flush()
	p.hub.drop = func(Event) bool { return true }
	p.ra.Free("a")
	p.hub.flush()
	epoch, seq := p.a.Position()
	now := p.clk.Now()
	p.b.Claim(1, epoch, seq, now)
	p.b.Claim(1, epoch, seq-1, now) // an older claim changes nothing
	if got := p.b.Lagging(now.Add(time.Second/2), time.Second); len(got) != 0 {
		t.Fatalf("lagging %v before the grace", got)
	}
	if got := p.b.Lagging(now.Add(time.Second), time.Second); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("lagging %v, want [1]", got)
	}
	if got := p.b.Lagging(now.Add(2*time.Second), time.Second); len(got) != 0 {
		t.Fatalf("a claim reported twice: %v", got)
	}
	// A claim the events catch up with is forgotten.
	p.hub.drop = nil
	if _, _, again := p.resync(); again {
		t.Fatal("again")
	}
	p.route(t, "b", 1)
	epoch, seq = p.a.Position()
	p.b.Claim(1, epoch, seq, now)
	p.hub.flush()
	if got := p.b.Lagging(now.Add(time.Minute), time.Second); len(got) != 0 {
		t.Fatalf("lagging %v although the events arrived", got)
	}
	p.agree(t, "end")
}

// TestResyncProperty drives a sender with random bookings, marks and
// frees while its events are randomly lost and snapshots of it are
// fetched at random moments (requested, taken and applied with events
// arriving in between). Invariants: the receiver agrees with the sender
// whenever nothing is in flight and every lost event is covered by a
// snapshot applied without "again"; and after a final snapshot taken
// while events are still flowing (none lost after it), the receiver
// agrees with the sender exactly.
func TestResyncProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		p := newPair(t)
		lossy := rapid.Bool().Draw(rt, "lossy")
		var live []string
		next := 0
		var maxLost, covered uint64 // latest lost seq; latest seq reconciled by a snapshot
		var lostSeqs []uint64
		var delivered uint64 // latest seq delivered
		p.hub.drop = func(ev Event) bool {
			if lossy && rapid.IntRange(0, 4).Draw(rt, "drop") == 0 {
				maxLost = ev.Seq
				lostSeqs = append(lostSeqs, ev.Seq)
				return true
			}
			delivered = ev.Seq
			return false
		}
		type flight struct {
			begun, taken bool
			snap         Snapshot
		}
		var f flight
		step := func(allowResync bool) {
			switch op := rapid.IntRange(0, 6).Draw(rt, "op"); {
			case op <= 1 || len(live) == 0:
				id := fmt.Sprint("q", next)
				p.route(t, id, next)
				live = append(live, id)
				next++
			case op == 2:
				p.ra.MarkPrefillCompleted(live[rapid.IntRange(0, len(live)-1).Draw(rt, "mark")])
			case op == 3:
				i := rapid.IntRange(0, len(live)-1).Draw(rt, "free")
				p.ra.Free(live[i])
				live = slices.Delete(live, i, i+1)
			case op == 4:
				p.hub.flush()
			case op == 5 && allowResync:
				switch {
				case !f.begun:
					p.b.BeginResync(1)
					f.begun = true
				case !f.taken:
					f.snap, f.taken = p.a.Snapshot(), true
				default:
					_, _, again := p.b.ApplySnapshot(f.snap)
					p.b.EndResync(1)
					// A hole after the snapshot among the events received
					// must be reported.
					hole := slices.ContainsFunc(lostSeqs, func(l uint64) bool { return l > f.snap.Seq && l < delivered })
					if again != hole {
						rt.Fatalf("again %v, want %v (snapshot at %d, lost %v, delivered up to %d)", again, hole, f.snap.Seq, lostSeqs, delivered)
					}
					if !again {
						covered = max(covered, f.snap.Seq)
					}
					f = flight{}
				}
			}
		}
		for range rapid.IntRange(0, 60).Draw(rt, "steps") {
			step(true)
			if maxLost <= covered && len(p.hub.pending) == 0 && !f.begun {
				p.agree(t, "every loss covered")
			}
		}
		if !lossy {
			p.hub.flush()
			if f.begun && f.taken {
				p.b.ApplySnapshot(f.snap)
			}
			p.b.EndResync(1)
			p.agree(t, "lossless run")
			return
		}
		// Final: a snapshot in flight while the sender keeps going and
		// events still get lost before it is taken; none after.
		p.hub.flush()
		if f.begun {
			p.b.EndResync(1)
		}
		p.b.BeginResync(1)
		for range rapid.IntRange(0, 10).Draw(rt, "before") {
			step(false)
		}
		snap := p.a.Snapshot()
		p.hub.flush()
		p.hub.drop = nil
		for range rapid.IntRange(0, 10).Draw(rt, "after") {
			step(false)
		}
		k := rapid.IntRange(0, len(p.hub.pending)).Draw(rt, "delivered before the snapshot")
		rest := slices.Clone(p.hub.pending[k:])
		p.hub.pending = p.hub.pending[:k]
		p.hub.flush()
		_, _, again := p.b.ApplySnapshot(snap)
		p.b.EndResync(1)
		p.hub.pending = rest
		p.hub.flush()
		if again {
			rt.Fatalf("snapshot reported incomplete with no loss after it")
		}
		p.agree(t, "after the final snapshot")
	})
}

// TestSnapshotLeavesOutSilentlyDropped: a router drops bookings without
// lifecycle events when a worker is removed (every replica removes it by
// itself). Its snapshots must not list them, or each resync would
// resurrect them on the peers (found by the chaos suite: phantom bookings
// after registry expiries and NATS restarts); and a receiver that dropped
// a peer's booking the same way gets it back when the worker returns and
// the peer still runs it.
func TestSnapshotLeavesOutSilentlyDropped(t *testing.T) {
	p := newPair(t)
	for i := range 9 {
		p.route(t, fmt.Sprint("w", i), i)
	}
	p.hub.flush()
	p.agree(t, "shared")
	var onTwo []string
	for _, ev := range p.a.Snapshot().Events {
		if ev.Worker.ID == 2 {
			onTwo = append(onTwo, ev.RequestID)
		}
	}
	if len(onTwo) == 0 || len(onTwo) == 9 {
		t.Fatalf("%d of 9 requests on worker 2: the test needs some on it and some elsewhere", len(onTwo))
	}
	// The sender alone removes worker 2 (the receiver will later): its
	// requests there are gone without a Free.
	if err := p.ra.RemoveWorker(2); err != nil {
		t.Fatal(err)
	}
	snap := p.a.Snapshot()
	for _, ev := range snap.Events {
		if slices.Contains(onTwo, ev.RequestID) {
			t.Fatalf("snapshot lists %s, dropped with its worker", ev.RequestID)
		}
	}
	if _, freed, _ := p.resync(); freed != len(onTwo) {
		t.Fatalf("resync freed %d, want the %d dropped with the worker", freed, len(onTwo))
	}
	if err := p.rb.RemoveWorker(2); err != nil {
		t.Fatal(err)
	}
	p.agree(t, "both removed worker 2")
	// The receiver drops worker 3 while the sender keeps it (its
	// requests there still run): the next resync books them again once
	// the worker is back.
	if err := p.rb.RemoveWorker(3); err != nil {
		t.Fatal(err)
	}
	if err := p.rb.AddWorker(router.WorkerInfo{ID: 3, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	if added, _, _ := p.resync(); added == 0 {
		t.Fatal("resync re-added nothing on worker 3")
	}
	if err := p.ra.RemoveWorker(2); err != nil {
		t.Fatal(err)
	}
	if err := p.ra.AddWorker(router.WorkerInfo{ID: 2, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	if err := p.rb.AddWorker(router.WorkerInfo{ID: 2, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	p.agree(t, "after the receiver's worker 3 came back")
	if n := len(p.a.Snapshot().Events); n == 0 {
		t.Fatal("nothing left booked: the last check proves nothing")
	}
}

// TestResyncQueue: flagged peers are taken lowest first, once however
// often flagged; a retry waits for its time unless a new trigger brings
// it forward.
func TestResyncQueue(t *testing.T) {
	s := &Sync{pending: map[uint64]resyncReq{}, kick: make(chan struct{}, 1)}
	now := t0
	s.flag(9, reasonGap)
	s.flag(3, reasonReconnect)
	s.flag(9, reasonPeriodic)
	s.pending[5] = resyncReq{reason: reasonRetry, tries: 2, notBefore: now.Add(time.Second)}
	var got []string
	for {
		p, r, ok, next := s.take(now)
		if !ok {
			if !next.Equal(now.Add(time.Second)) {
				t.Fatalf("next due %v, want the retry's", next)
			}
			break
		}
		got = append(got, fmt.Sprint(p, r.reason))
	}
	if want := []string{"3reconnect", "9gap"}; !slices.Equal(got, want) {
		t.Fatalf("taken %v, want %v", got, want)
	}
	if p, _, ok, _ := s.take(now.Add(time.Second)); !ok || p != 5 {
		t.Fatalf("retry not due at its time: %d %v", p, ok)
	}
	s.pending[5] = resyncReq{reason: reasonRetry, tries: 2, notBefore: now.Add(time.Second)}
	s.flag(5, reasonGap)
	if p, r, ok, _ := s.take(now); !ok || p != 5 || r.reason != reasonGap || r.tries != 0 {
		t.Fatalf("a new trigger did not bring the retry forward: %d %+v %v", p, r, ok)
	}
}

// TestDropLostFreesOnPeers: when the sender drops bookings without a Free
// (its worker removed) and the receiver keeps that worker (it missed the
// removal in the registry), DropLost publishes the Frees: the receiver
// frees them at once, without waiting for a resync.
func TestDropLostFreesOnPeers(t *testing.T) {
	p := newPair(t)
	for i := range 9 {
		p.route(t, fmt.Sprint("d", i), i)
	}
	p.hub.flush()
	if err := p.ra.RemoveWorker(2); err != nil {
		t.Fatal(err)
	}
	before, _ := loadSum(p.rb)
	n := p.a.DropLost()
	if n == 0 || n == 9 {
		t.Fatalf("%d of 9 bookings dropped with worker 2: the test needs some", n)
	}
	if again := p.a.DropLost(); again != 0 {
		t.Fatalf("second DropLost found %d more", again)
	}
	p.hub.flush()
	if len(p.hub.resyncs) != 0 {
		t.Fatalf("the Frees left a hole: %v", p.hub.resyncs)
	}
	after, _ := loadSum(p.rb)
	sender, _ := loadSum(p.ra)
	if after != before-n || after != sender {
		t.Fatalf("receiver holds %d (was %d, %d dropped), sender %d", after, before, n, sender)
	}
	if s := p.a.Stats(); s.LocalDropped != uint64(n) {
		t.Fatalf("LocalDropped %d, want %d", s.LocalDropped, n)
	}
}

// TestRetryJS: a start-up JetStream call is retried, each attempt bounded,
// until it succeeds or the caller's context ends (its last error then).
func TestRetryJS(t *testing.T) {
	calls := 0
	err := retryJS(context.Background(), func(ctx context.Context) error {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Fatal("attempt without a deadline")
		}
		if calls < 3 {
			return errors.New("lost reply")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want success at the third", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err = retryJS(ctx, func(context.Context) error { return errors.New("still down") })
	if err == nil || err.Error() != "still down" {
		t.Fatalf("err %v, want the last attempt's", err)
	}
}
