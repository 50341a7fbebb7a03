package chaos

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
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
	eventually(t, 15*time.Second, "routers ready", func() (bool, string) { return c.ready() })
	l := newLoad(c, 7, 5*time.Second, &windows{})
	for i, p := range l.prompts[:8] {
		if o, detail := l.do(c.routers[0].url(), p, 2); o != outOK {
			t.Fatalf("request %d: %s: %s", i, o, detail)
		}
	}
	l.client.CloseIdleConnections()
	eventually(t, 10*time.Second, "index equals the engines' caches", func() (bool, string) { return c.indexMatches() })
	if cachedBlocks(c) == 0 {
		t.Fatal("nothing cached: the control proves nothing")
	}

	// A block no engine holds, planted in the router's index.
	svc := c.routers[0].service()
	w := kvevent.Worker{ID: kvevent.WorkerID(c.workers[0].id)}
	if err := svc.Index().Apply(kvevent.Event{Worker: w, Kind: kvevent.Stored,
		Blocks: []kvevent.Block{{EngineHash: 0xdead, LocalHash: 0xbeef}}}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.indexMatches(); ok {
		t.Fatal("an extra block in the router's index went unnoticed")
	}
	// A booking nobody frees. The 8 requests above free their bookings just
	// after their last byte reaches the client, so wait for zero first.
	eventually(t, 10*time.Second, "bookings of the finished requests freed", func() (bool, string) { return c.noBookings() })
	if _, err := svc.Router().Route(router.Request{ID: "control", Tokens: l.prompts[0]}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.noBookings(); ok {
		t.Fatal("a booked request went unnoticed")
	}
	svc.Router().Free("control")
}
