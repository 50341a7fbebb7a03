//go:build chaos

package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestChaosDurableFaults is a scripted schedule on the NATS plane in
// durable mode (issue 6): the faults the random schedules could not
// include while durable mode lacked gap repair and restart detection,
// each on purpose. Event batches dropped before the stream (the worker
// numbered them, the broker never saw them), worker processes crashing
// and coming back (a new publisher, ids from 0, an empty cache), one of
// them while a router is down, and a NATS restart under load. After the
// heal every router's index must equal the engines' caches.
func TestChaosDurableFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	logs := &logBuf{}
	stats := newCounters()
	const seed uint64 = 6150703134289819640 // the crash seed of the former known issue
	defer func() {
		if t.Failed() {
			path := filepath.Join(os.TempDir(), fmt.Sprintf("kvrouter-chaos-durable-%d.log", seed))
			if err := os.WriteFile(path, []byte(logs.tail(64<<20)), 0o644); err == nil {
				t.Logf("full logs: %s", path)
			}
			t.Logf("logs (tail):\n%s", logs.tail(20000))
		}
	}()
	c, err := newCluster(clusterConfig{workers: 3, routers: 2, kvBlocks: 160, seed: seed, dataDir: t.TempDir(),
		nats: true, durable: true}, logs, stats)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	poll.UntilState(t, 15*time.Second, func() (bool, string) { return c.ready() }, "routers ready")
	ctx := t.Context()
	l := newLoad(c, seed, 2500*time.Millisecond, &windows{})
	l.run(8, seed)
	halted := false
	defer func() {
		if !halted {
			l.halt()
		}
	}()
	step := func(what string, f func() error) {
		t.Helper()
		c.log.Info("CHAOS step", "fault", what)
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		stats.add("fault: "+what, 1)
		sleep(ctx, 200*time.Millisecond)
	}
	w0, w1, w2 := c.workers[0], c.workers[1], c.workers[2]
	step("batches dropped before the stream", func() error {
		w0.setFaults(eventFaults{drop: 0.5})
		sleep(ctx, 600*time.Millisecond)
		w0.setFaults(eventFaults{})
		return nil
	})
	step("worker crash+restart", func() error {
		w1.stop()
		sleep(ctx, 300*time.Millisecond)
		return c.restartWorker(ctx, w1)
	})
	step("worker crash+restart and drops while a router is down", func() error {
		r := c.routers[0]
		if err := r.stop(); err != nil {
			return err
		}
		w2.stop()
		w0.setFaults(eventFaults{drop: 0.5, dup: 0.2})
		sleep(ctx, 300*time.Millisecond)
		if err := c.restartWorker(ctx, w2); err != nil {
			return err
		}
		sleep(ctx, 300*time.Millisecond)
		w0.setFaults(eventFaults{})
		return r.start()
	})
	step("NATS server restart", func() error {
		c.bus.stop()
		sleep(ctx, 400*time.Millisecond)
		return c.bus.start()
	})
	step("worker crash+restart", func() error {
		w1.stop()
		return c.restartWorker(ctx, w1)
	})
	c.log.Info("CHAOS healed")
	poll.UntilState(t, 20*time.Second, c.settled(ctx), "routers ready, every worker routable and every registration fresh after the last fault")
	l.halt()
	halted = true
	nudge := uint64(0)
	poll.UntilState(t, 20*time.Second, func() (bool, string) {
		ok, detail := c.indexMatches()
		if !ok {
			nudge++
			for _, w := range c.workers {
				_ = w.direct(ctx, prompts(1, seed+977*nudge)[0])
			}
		}
		return ok, detail
	}, "every router's index equals the engines' caches")
	if n := cachedBlocks(c); n == 0 {
		t.Error("no engine caches anything: the index comparison proves nothing")
	}
	outs, _ := l.counts()
	if outs[outOK] == 0 {
		t.Errorf("no request succeeded during the schedule: %v", outs)
	}
	if outs[outVanished] > 0 {
		t.Errorf("%d requests vanished", outs[outVanished])
	}
	t.Logf("durable schedule: requests %v; %v; nudges %d", outs, stats.snapshot(), nudge)
}

// TestChaosServiceDurableLong is the NATS-plane long suite with durable
// mode on in every schedule (newNATSSchedule draws it for half of them).
// -chaos.schedules sets how many (default 6); -chaos.seed replays one.
func TestChaosServiceDurableLong(t *testing.T) {
	var rs []result
	for _, seed := range seeds(longSchedules(6, 1)) {
		s := newNATSSchedule(seed, 16)
		s.durable = true
		rs = append(rs, runSchedule(t, s))
	}
	report(t, rs)
}
