package chaos

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestChaosRegistryExpiry is a scripted NATS-plane schedule for the
// expiry invariant (issue 10): one worker's heartbeats stop past the TTL
// and it registers again, then the NATS server stays down past the TTL
// (every registration expires while the routers' watchers are blind) and
// comes back. Every router must log the removal of the first worker and
// keep the others (issue 21: their records come back from the same
// processes, so the lapse is the outage's), then settle with all of them
// EXACT and serve a clean phase without an error.
func TestChaosRegistryExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	logs := &logBuf{}
	stats := newCounters()
	defer func() {
		if t.Failed() {
			t.Logf("logs (tail):\n%s", logs.tail(20000))
		}
	}()
	const seed = 10
	c, err := newCluster(clusterConfig{workers: 3, routers: 2, kvBlocks: 160, seed: seed, dataDir: t.TempDir(), nats: true}, logs, stats)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ctx := t.Context()
	poll.UntilState(t, 15*time.Second, c.settled(ctx), "routers ready")
	l := newLoad(c, seed, 2500*time.Millisecond, &windows{})
	l.run(6, seed)
	halted := false
	defer func() {
		if !halted {
			l.halt()
		}
	}()
	c.log.Info("CHAOS step", "fault", faultNames[faultRegistryExpire])
	if err := c.workers[0].expire(ctx, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 15*time.Second, c.settled(ctx), "routers ready after the expiry")
	c.log.Info("CHAOS step", "fault", faultNames[faultNATSRestart])
	if err := c.restartNATS(ctx, registryTTL+300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 20*time.Second, c.settled(ctx), "routers settled after the NATS outage")
	l.halt()
	halted = true
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		ok, detail, _, _ := c.expiriesSeen()
		return ok, detail
	}, "every router removed every expired registration and kept every lapsed one")
	_, _, checked, skipped := c.expiriesSeen()
	if want := 2 * (1 + 3); checked != want || skipped != 0 {
		t.Errorf("checked %d (router × expiry), skipped %d; want %d, 0", checked, skipped, want)
	}
	clean := newLoad(c, seed+1, 10*time.Second, &windows{})
	for i := range 16 {
		r := c.routers[i%len(c.routers)]
		if o, detail := clean.do(r.url(), clean.prompts[i%len(clean.prompts)], 4); o != outOK {
			t.Errorf("request %d after the outage via router %d: %s: %s", i, r.k, o, detail)
		}
	}
	clean.client.CloseIdleConnections()
	outs, _ := l.counts()
	if outs[outVanished] > 0 {
		t.Errorf("%d requests vanished", outs[outVanished])
	}
	t.Logf("requests %v; %v; %d removals logged", outs, stats.snapshot(), c.removals.total())
}
