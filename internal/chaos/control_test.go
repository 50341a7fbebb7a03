package chaos

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// TestInvariantsCanFail is the negative control: the checks the schedules
// rely on do report a router whose index or bookings differ from the
// truth, so a passing schedule means something.
func TestInvariantsCanFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	logs := &logBuf{}
	c, err := newCluster(clusterConfig{workers: 2, routers: 1, kvBlocks: 160, seed: 7, dataDir: t.TempDir()}, logs, newCounters())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	poll.UntilState(t, 15*time.Second, func() (bool, string) { return c.ready() }, "routers ready")
	l := newLoad(c, 7, 5*time.Second, &windows{})
	for i, p := range l.prompts[:8] {
		if o, detail := l.do(c.routers[0].url(), p, 2); o != outOK {
			t.Fatalf("request %d: %s: %s", i, o, detail)
		}
	}
	l.client.CloseIdleConnections()
	poll.UntilState(t, 10*time.Second, func() (bool, string) { return c.indexMatches() }, "index equals the engines' caches")
	if cachedBlocks(c) == 0 {
		t.Fatal("nothing cached: the control proves nothing")
	}

	// A block no engine holds, planted in the router's index.
	svc := c.routers[0].service()
	w := kvevent.WorkerRank{ID: kvevent.WorkerID(c.workers[0].id)}
	if err := svc.Index().Apply(kvevent.Event{Worker: w, Kind: kvevent.Stored,
		Blocks: []kvevent.Block{{EngineHash: 0xdead, LocalHash: 0xbeef}}}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.indexMatches(); ok {
		t.Fatal("an extra block in the router's index went unnoticed")
	}
	// A booking nobody frees. The 8 requests above free their bookings just
	// after their last byte reaches the client, so wait for zero first.
	poll.UntilState(t, 10*time.Second, func() (bool, string) { return c.noBookings() }, "bookings of the finished requests freed")
	if _, err := svc.Router().Route(router.Request{ID: "control", Tokens: l.prompts[0]}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.noBookings(); ok {
		t.Fatal("a booked request went unnoticed")
	}
	svc.Router().Free("control")
}

// TestExpiryInvariantCanFail is the negative control of the expiry
// invariant: a router that never logged the removal of a worker whose
// registration expired, or logged it outside the expiry's window, is
// reported; a router restarted since is not held to it. The removals come
// through the same log handler the fleet uses.
func TestExpiryInvariantCanFail(t *testing.T) {
	tap := newRemovalTap()
	log := slog.New(&tapHandler{inner: slog.NewTextHandler(io.Discard, nil), tap: tap})
	c := &cluster{removals: tap, routers: []*routerProc{{k: 0}, {k: 1}}}
	c.routers[0].gen.Store(1)
	c.routers[1].gen.Store(1)
	from := time.Now()
	c.addExpiry(expiry{worker: "mock-1", cause: "test", from: from, back: from.Add(time.Second), knew: map[int]uint64{0: 1, 1: 1}})

	check := func(want bool, what string) {
		t.Helper()
		if ok, detail, _, _ := c.expiriesSeen(); ok != want {
			t.Fatalf("%s: invariant holds = %v, want %v (%s)", what, ok, want, detail)
		}
	}
	check(false, "no router logged the removal")
	log.With("router", 0).Info(removedMsg, "worker", "mock-1")
	log.With("router", 1).Info(removedMsg, "worker", "mock-2")
	check(false, "router 1 removed another worker")
	log.With("router", 1).Info("worker added", "worker", "mock-1")
	check(false, "router 1 logged something else")
	log.With("router", 1).Info(removedMsg, "worker", "mock-1")
	check(true, "both routers removed it")

	// A removal logged before the heartbeats stopped does not count.
	from = time.Now().Add(time.Hour)
	c.addExpiry(expiry{worker: "mock-3", cause: "test", from: from, back: from, knew: map[int]uint64{1: 1}})
	log.With("router", 1).Info(removedMsg, "worker", "mock-3")
	check(false, "a removal before the expiry")
	// Router 1 restarted since: its new process never had the record (its
	// removal of mock-1 still counts as checked).
	c.routers[1].gen.Store(2)
	check(true, "the router restarted")
	if _, _, checked, skipped := c.expiriesSeen(); checked != 2 || skipped != 1 {
		t.Fatalf("checked %d, skipped %d; want 2, 1", checked, skipped)
	}

	// A registration lapsed in a NATS outage must be kept, not removed.
	from = time.Now()
	c.addExpiry(expiry{worker: "mock-4", cause: "test", from: from, back: from.Add(time.Second), knew: map[int]uint64{0: 1}, kept: true})
	check(false, "router 0 did not say it kept mock-4")
	log.With("router", 0).Info(keptMsg, "worker", "mock-4")
	check(true, "router 0 kept mock-4")
	log.With("router", 0).Info(removedMsg, "worker", "mock-4")
	check(false, "router 0 removed mock-4 as well")
}
