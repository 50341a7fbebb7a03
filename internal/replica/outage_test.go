package replica

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// outageReplica is a replica for the outage tests: records outlive the
// outage (TTL 5 s) and the periodic resync is off, so only the
// mechanisms under test can repair a lost event.
func outageReplica(t *testing.T, url string, id uint64) *replicaUnderTest {
	return startReplica(t, url, id, func(c *Config) {
		c.TTL = 5 * time.Second
		c.ResyncInterval = 0
	})
}

// TestSyncConnectionCutReconciles: the receiver's connection is cut while
// the peer frees most of its requests (the Frees reach no subscriber of
// the receiver's and are lost). On reconnect the receiver fetches the
// peer's snapshot and frees the phantoms: its load returns to exactly the
// peer's true state without waiting for the booking expiry.
func TestSyncConnectionCutReconciles(t *testing.T) {
	ns := natstest.StartRestartable(t)
	peer := outageReplica(t, ns.URL(), 71)
	recv := outageReplica(t, ns.URL(), 72)
	poll.Until(t, 5*time.Second, func() bool { return len(recv.s.Core().Peers()) == 1 && len(peer.s.Core().Peers()) == 1 }, "peers")
	for i := range 10 {
		if _, err := peer.r.Route(router.Request{ID: fmt.Sprint("o", i), Tokens: prompt(i%3, i, 32, 96)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(recv.r); return n == 10 }, "bookings shared")

	nc := recv.s.bus.Conn()
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Server().DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "receiver disconnected")
	for i := range 7 {
		peer.r.Free(fmt.Sprint("o", i))
	}
	poll.Until(t, 5*time.Second, func() bool {
		return metricstest.Sum(t, peer.reg, "kvrouter_replica_events_published_total") == 17
	}, "the peer's Frees published")
	poll.Until(t, 5*time.Second, func() bool {
		n, _ := loadSum(recv.r)
		return n == 3
	}, "receiver back to the peer's true state")
	if s := recv.s.Core().Stats(); s.ResyncFreed != 7 {
		t.Errorf("resync freed %d, want the 7 lost Frees (stats %+v)", s.ResyncFreed, s)
	}
	if diff := loadDiff(peer.r, recv.r); diff != "" {
		t.Fatalf("receiver's load differs from the peer's:\n%s", diff)
	}
}

// TestSyncServerRestartReconciles: the NATS server stops while a peer
// frees requests and marks others, and comes back (same port and store);
// whoever reconnects first, the receiver's load converges to exactly the
// peer's true state.
func TestSyncServerRestartReconciles(t *testing.T) {
	ns := natstest.StartRestartable(t)
	peer := outageReplica(t, ns.URL(), 81)
	recv := outageReplica(t, ns.URL(), 82)
	poll.Until(t, 5*time.Second, func() bool { return len(recv.s.Core().Peers()) == 1 && len(peer.s.Core().Peers()) == 1 }, "peers")
	for i := range 12 {
		if _, err := peer.r.Route(router.Request{ID: fmt.Sprint("n", i), Tokens: prompt(i%3, i, 32, 96)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(recv.r); return n == 12 }, "bookings shared")
	ns.Stop()
	for i := range 8 {
		peer.r.Free(fmt.Sprint("n", i))
	}
	peer.r.MarkPrefillCompleted("n9")
	ns.Start(true)
	poll.Until(t, 5*time.Second, func() bool { return loadDiff(peer.r, recv.r) == "" }, "receiver back to the peer's true state")
}

// loadDiff describes how b's per-worker load differs from a's ("" when
// equal).
func loadDiff(a, b *router.Router) string {
	la, lb := a.Loads(), b.Loads()
	if fmt.Sprint(la) == fmt.Sprint(lb) {
		return ""
	}
	return fmt.Sprintf("peer     %+v\nreceiver %+v", la, lb)
}
