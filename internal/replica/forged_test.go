package replica

import (
	"time"

	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// The probe of issue 21: a NATS client that never joined (no membership
// record) publishes AddRequests stamped with a made-up router id. They
// used to be booked and stayed until the ledger's expiry, keeping a
// worker busy for nothing. Now they are refused and counted, nothing is
// kept for that id, and a real peer's bookings still arrive and are freed
// when its membership ends.
func TestForgedRouterBookingsRefused(t *testing.T) {
	url := server(t)
	a := startReplica(t, url, 10)
	b := startReplica(t, url, 11)
	poll.Until(t, 5*time.Second, func() bool { return a.s.Core().Member(11) }, "a sees b")

	forger, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	const forged = 20
	for i := range forged {
		data, err := AppendEvent(nil, Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 666,
			RequestID: fmt.Sprint("forged-", i), Worker: kvevent.WorkerRank{ID: 1}, PrefillTokens: 4096}, Epoch: 1, Seq: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := forger.Publish(EventsSubject(DefaultConfig().Namespace, DefaultConfig().Component), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	refused := func() float64 {
		return metricstest.Sum(t, a.reg, "kvrouter_replica_unannounced_refused_total")
	}
	poll.Until(t, 5*time.Second, func() bool { return refused() >= forged }, "the forged bookings refused")

	if _, err := b.r.Route(router.Request{ID: "honest", Tokens: prompt(1, 1, 64, 200)}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { reqs, _ := loadSum(a.r); return reqs >= 1 }, "a sees b's booking")
	if reqs, prefill := loadSum(a.r); reqs != 1 || prefill >= 4096 {
		t.Fatalf("a books %d requests (%d prefill tokens), want only b's", reqs, prefill)
	}
	if a.s.Core().Holds(666) {
		t.Fatal("state kept for the made-up router id")
	}

	// b's membership ends: what it booked on a is freed.
	if err := b.s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { reqs, _ := loadSum(a.r); return reqs == 0 }, "b's booking freed when it left")
}

// Core: a router id that is not a live peer gets nothing applied and
// nothing kept (events, snapshots, claims); once PeerUp announces it, its
// events and snapshot are applied.
func TestCoreRefusesUnannouncedRouters(t *testing.T) {
	clk := &clock{now: t0}
	r := newTestRouter(t, 1, 2, clk.Now)
	c := NewCore(r, CoreConfig{}, nil)
	add := func(id string, seq uint64) Event {
		return Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 2, RequestID: id,
			Worker: kvevent.WorkerRank{ID: 1}, PrefillTokens: 10}, Epoch: 7, Seq: seq}
	}
	c.Receive(add("early", 1))
	c.Claim(2, 7, 5, clk.Now())
	if _, _, again := c.ApplySnapshot(Snapshot{RouterID: 2, Epoch: 7, Seq: 1, Events: []router.LifecycleEvent{add("early", 1).LifecycleEvent}}); again {
		t.Fatal("snapshot of an unannounced router asked for again")
	}
	if reqs, _ := loadSum(r); reqs != 0 {
		t.Fatalf("%d requests booked for an unannounced router", reqs)
	}
	if got := c.Stats().Unannounced; got != 3 {
		t.Fatalf("Unannounced %d, want 3 (event, claim, snapshot)", got)
	}
	if c.Holds(2) {
		t.Fatal("state kept for the unannounced router id")
	}
	if c.PeerUp(2) {
		t.Fatal("a new peer reported as returned")
	}
	// The joined peer's snapshot brings back what was refused.
	if added, _, _ := c.ApplySnapshot(Snapshot{RouterID: 2, Epoch: 7, Seq: 1, Events: []router.LifecycleEvent{add("early", 1).LifecycleEvent}}); added != 1 {
		t.Fatalf("snapshot after PeerUp added %d, want 1", added)
	}
	c.Receive(add("later", 2))
	if reqs, _ := loadSum(r); reqs != 2 {
		t.Fatalf("%d requests booked after the peer joined, want 2", reqs)
	}
	c.PeerDown(2, clk.Now())
	if reqs, _ := loadSum(r); reqs != 0 {
		t.Fatalf("%d requests still booked after the peer's membership ended", reqs)
	}
}
