//go:build chaos

package chaos

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestChaosHealAfterNATSOutages is the regression of the heal race: after
// a NATS outage about as long as the TTL, a router may pass a ready check
// and only then drop (and re-add) workers whose registrations lapsed
// during the outage, so the first requests after the heal get 503
// "selecting among 0 workers". Eight outages from 0.3 to 0.86 s, each
// followed by settled and a burst of requests that must all succeed. With
// a plain ready() in place of settled, 21 of 240 failed (scratch run at
// 7ac01eb).
func TestChaosHealAfterNATSOutages(t *testing.T) {
	logs := &logBuf{}
	defer func() {
		if t.Failed() {
			t.Logf("logs (tail):\n%s", logs.tail(20000))
		}
	}()
	c, err := newCluster(clusterConfig{workers: 3, routers: 2, kvBlocks: 160, seed: 3, dataDir: t.TempDir(), nats: true}, logs, newCounters())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ctx := t.Context()
	poll.UntilState(t, 15*time.Second, c.settled(ctx), "routers ready")
	for i := range 8 {
		c.log.Info("CHAOS step", "fault", faultNames[faultNATSRestart], "round", i)
		if err := c.restartNATS(ctx, time.Duration(300+i*80)*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		poll.UntilState(t, 20*time.Second, c.settled(ctx), "routers settled after the outage")
		clean := newLoad(c, uint64(i), 10*time.Second, &windows{})
		for j := range 30 {
			r := c.routers[j%len(c.routers)]
			if o, detail := clean.do(r.url(), clean.prompts[j%len(clean.prompts)], 4); o != outOK {
				t.Errorf("outage %d, request %d via router %d: %s: %s", i, j, r.k, o, detail)
			}
		}
		clean.client.CloseIdleConnections()
	}
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		ok, detail, _, _ := c.expiriesSeen()
		return ok, detail
	}, "every router removed every expired registration")
}
