package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server starts an embedded NATS server (random port) and returns its URL.
func server(t *testing.T) string {
	t.Helper()
	c := natsbus.DefaultConfig()
	c.Port = -1
	c.DataDir = t.TempDir()
	c.ReconnectWait = 50 * time.Millisecond
	b, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(); b.WaitForShutdown() })
	return b.ClientURL()
}

type replicaUnderTest struct {
	r   *router.Router
	s   *Sync
	reg *prometheus.Registry
}

// startReplica connects its own client to url and starts replica sync for
// a fresh router with id.
func startReplica(t *testing.T, url string, id uint64, opts ...func(*Config)) *replicaUnderTest {
	t.Helper()
	c := natsbus.DefaultConfig()
	c.URL = url
	c.ReconnectWait = 50 * time.Millisecond
	bus, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
	r := newTestRouter(t, id, 4, time.Now)
	cfg := DefaultConfig()
	cfg.Clock = time.Now // the router's
	cfg.TTL = time.Second
	cfg.SnapshotTimeout = 500 * time.Millisecond
	cfg.ChunkEvents = 3 // several chunks per snapshot
	for _, o := range opts {
		o(&cfg)
	}
	reg := prometheus.NewRegistry()
	s, err := New(cfg, bus, r, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return &replicaUnderTest{r: r, s: s, reg: reg}
}

func requests(rs []*replicaUnderTest) func() []int {
	return func() []int {
		out := make([]int, len(rs))
		for i, x := range rs {
			out[i], _ = loadSum(x.r)
		}
		return out
	}
}

func all(v []int, want int) bool {
	for _, x := range v {
		if x != want {
			return false
		}
	}
	return true
}

// knowEachOther reports whether every replica has every other as a live
// peer: before that, a replica refuses the events of a peer it has not
// seen announce itself (and fetches its snapshot once it does).
func knowEachOther(rs []*replicaUnderTest) func() bool {
	return func() bool {
		for _, x := range rs {
			if len(x.s.Core().Peers()) != len(rs)-1 {
				return false
			}
		}
		return true
	}
}

// TestSyncReplicasSplitWorkload: n replicas each route a share of the
// requests; every booking, prefill mark and free reaches every replica
// through its events. Shadows are off: a replica's shadows stand in for
// its peers' bookings until their events arrive, so with them every
// router counts every booking before any event was exchanged (seen: the
// checks below passed with nothing published yet, and the published
// counter read 0).
func TestSyncReplicasSplitWorkload(t *testing.T) {
	noShadows := func(c *Config) { c.Shadows = false }
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			url := server(t)
			var rs []*replicaUnderTest
			for i := range n {
				rs = append(rs, startReplica(t, url, uint64(10+i), noShadows))
			}
			poll.Until(t, 5*time.Second, knowEachOther(rs), "every replica to know every other")
			const total = 24
			for i := range total {
				x := rs[i%n]
				if _, err := x.r.Route(router.Request{ID: fmt.Sprint("req", i), Tokens: prompt(i%4, i, 64, 200)}); err != nil {
					t.Fatal(err)
				}
			}
			poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), total) }, "every router to see every booking")
			for i := range total {
				rs[i%n].r.MarkPrefillCompleted(fmt.Sprint("req", i))
				rs[i%n].r.Free(fmt.Sprint("req", i))
			}
			poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), 0) }, "zero load everywhere")
			for _, x := range rs {
				for _, l := range x.r.Loads() {
					if l.ActivePrefillTokens != 0 || l.ActiveBlocks != 0 {
						t.Fatalf("residual load %+v", l)
					}
				}
			}
			// Each replica's events reached the others; a message is counted
			// once the client took it, which can be after a peer applied it.
			for i, x := range rs {
				want := float64(3 * total / n)
				poll.UntilState(t, 5*time.Second, func() (bool, string) {
					got := metricstest.Sum(t, x.reg, "kvrouter_replica_events_published_total")
					return got == want, fmt.Sprintf("%v published", got)
				}, fmt.Sprintf("replica %d to publish %v events (add, mark, free of its share)", i, want))
			}
		})
	}
}

// TestSyncReplicaCrash: a replica stops without freeing (no deregistration
// either); once its record expires the survivors' load returns to zero.
func TestSyncReplicaCrash(t *testing.T) {
	url := server(t)
	rs := []*replicaUnderTest{startReplica(t, url, 21), startReplica(t, url, 22), startReplica(t, url, 23)}
	poll.Until(t, 5*time.Second, knowEachOther(rs), "every replica to know every other")
	for i := range 18 {
		if _, err := rs[i%3].r.Route(router.Request{ID: fmt.Sprint("c", i), Tokens: prompt(1, i, 32, 128)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), 18) }, "bookings shared")
	if err := rs[2].s.teardown(context.Background(), false); err != nil { // crash: nothing freed, record left to expire
		t.Fatal(err)
	}
	for i := range 18 {
		if i%3 != 2 {
			rs[i%3].r.Free(fmt.Sprint("c", i))
		}
	}
	survivors := rs[:2]
	poll.Until(t, 5*time.Second, func() bool { return all(requests(survivors)(), 6) }, "survivors to hold only the crashed replica's bookings")
	poll.Until(t, 5*time.Second, func() bool { return all(requests(survivors)(), 0) }, "survivors' load back to zero")
	if s := rs[0].s.Core().Stats(); s.PeerFreed != 6 {
		t.Errorf("peer freed %d, want 6", s.PeerFreed)
	}
}

// TestSyncGracefulLeave: Close deregisters, so peers free at once.
func TestSyncGracefulLeave(t *testing.T) {
	url := server(t)
	a, b := startReplica(t, url, 31), startReplica(t, url, 32)
	poll.Until(t, 5*time.Second, func() bool { return len(a.s.Core().Peers()) == 1 }, "peers")
	for i := range 4 {
		if _, err := b.r.Route(router.Request{ID: fmt.Sprint("g", i), Tokens: prompt(1, i, 32, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(a.r); return n == 4 }, "bookings shared")
	if err := b.s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(a.r); return n == 0 }, "freed on leave")
}

// TestSyncLateJoinerGetsSnapshot: a replica started after bookings were
// made sees them as soon as Start returns, without any new event.
func TestSyncLateJoinerGetsSnapshot(t *testing.T) {
	url := server(t)
	rs := []*replicaUnderTest{startReplica(t, url, 41), startReplica(t, url, 42)}
	poll.Until(t, 5*time.Second, func() bool { return len(rs[0].s.Core().Peers()) == 1 }, "peers")
	for i := range 10 {
		id := fmt.Sprint("s", i)
		if _, err := rs[i%2].r.Route(router.Request{ID: id, Tokens: prompt(i%2, i, 32, 96)}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			rs[i%2].r.MarkPrefillCompleted(id)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), 10) }, "bookings shared")
	late := startReplica(t, url, 43)
	if n, _ := loadSum(late.r); n != 10 {
		t.Fatalf("late joiner sees %d bookings right after Start, want 10", n)
	}
	poll.Until(t, 5*time.Second, func() bool {
		_, p0 := loadSum(rs[0].r)
		_, pl := loadSum(late.r)
		return p0 == pl
	}, "shadows gone")
	if s := late.s.Core().Stats(); s.SnapshotApplied != 10 {
		t.Errorf("snapshot applied %d, want 10", s.SnapshotApplied)
	}
}

// TestSyncHerdingOverNATS reports the per-worker split of bursts of
// identical-prefix requests released on 3 replicas at once over real NATS
// (worker 1 caches the prefix), with and without shadows. Delivery timing
// is not controlled here (TestHerdingShadows is the deterministic
// version), so only the bookkeeping is asserted: every request counted,
// and zero load everywhere once all are freed and the shadows ended.
func TestSyncHerdingOverNATS(t *testing.T) {
	for _, shadows := range []bool{false, true} {
		t.Run(fmt.Sprint("shadows=", shadows), func(t *testing.T) {
			url := server(t)
			var rs []*replicaUnderTest
			for i := range 3 {
				rs = append(rs, startReplica(t, url, uint64(50+i), func(c *Config) { c.Shadows = shadows }))
			}
			poll.Until(t, 5*time.Second, func() bool {
				return len(rs[0].s.Core().Peers()) == 2 && len(rs[1].s.Core().Peers()) == 2 && len(rs[2].s.Core().Peers()) == 2
			}, "peers")
			for _, x := range rs {
				if err := x.r.ApplyEvent(storedEvent(t, 1, prompt(7, 0, 512, 512), 16)); err != nil {
					t.Fatal(err)
				}
			}
			const per = 4
			counts := make([][]int, 3)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, x := range rs {
				counts[i] = make([]int, 5)
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for k := range per {
						d, err := x.r.Route(router.Request{ID: fmt.Sprintf("h%d-%d", i, k), Tokens: prompt(7, i*10+k+1, 512, 576)})
						if err != nil {
							t.Error(err)
							return
						}
						counts[i][d.Worker.ID]++
					}
				}()
			}
			close(start)
			wg.Wait()
			total := make([]int, 4)
			for _, c := range counts {
				for w := 1; w <= 4; w++ {
					total[w-1] += c[w]
				}
			}
			t.Logf("3 replicas x %d requests, shadows=%v: per-worker %v", per, shadows, total)
			if sum := total[0] + total[1] + total[2] + total[3]; sum != 3*per {
				t.Fatalf("%d requests counted", sum)
			}
			poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), 3*per) }, "every booking everywhere")
			for i := range rs {
				for k := range per {
					rs[i].r.Free(fmt.Sprintf("h%d-%d", i, k))
				}
			}
			poll.Until(t, 5*time.Second, func() bool { return all(requests(rs)(), 0) }, "zero load everywhere")
		})
	}
}

// TestSyncQueueFullDropsAndCounts: routing never blocks on a full outgoing
// queue; the overflow is dropped and counted in the metric.
func TestSyncQueueFullDropsAndCounts(t *testing.T) {
	url := server(t)
	c := natsbus.DefaultConfig()
	c.URL = url
	bus, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
	r := newTestRouter(t, 77, 2, time.Now)
	cfg := DefaultConfig()
	cfg.QueueSize = 2
	reg := prometheus.NewRegistry()
	s, err := New(cfg, bus, r, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing drains the queue.
	for i := range 5 {
		if _, err := r.Route(router.Request{ID: fmt.Sprint("d", i), Tokens: prompt(1, i, 16, 48)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricstest.Sum(t, reg, "kvrouter_replica_events_dropped_total"); got != 3 {
		t.Fatalf("dropped %v, want 3", got)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestSyncReturningReplicaRefetched: a replica whose heartbeats stop for
// longer than the TTL is declared gone (its bookings freed); when its
// record comes back, its peers fetch its bookings again.
func TestSyncReturningReplicaRefetched(t *testing.T) {
	url := server(t)
	a, b := startReplica(t, url, 61), startReplica(t, url, 62)
	poll.Until(t, 5*time.Second, func() bool { return len(a.s.Core().Peers()) == 1 }, "peers")
	for i := range 5 {
		if _, err := b.r.Route(router.Request{ID: fmt.Sprint("b", i), Tokens: prompt(3, i, 32, 64)}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(a.r); return n == 5 }, "bookings shared")
	b.s.lease.Abandon() // heartbeats cut off, b otherwise alive
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(a.r); return n == 0 }, "b declared gone")
	if err := b.s.lease.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { n, _ := loadSum(a.r); return n == 5 }, "b's bookings fetched again")
}

// TestSyncUsesTheRoutersClock: shadows are booked and ended at the time of
// the router's clock (the one Sync is given too), not the wall clock's:
// with both on a fake clock far in the past, a shadow booked by the
// router's Route lives until that clock reaches its TTL, and ends exactly
// then. (Not started, so no tick of the publisher's runs in between.)
func TestSyncUsesTheRoutersClock(t *testing.T) {
	c := natsbus.DefaultConfig()
	c.URL = server(t)
	bus, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
	clk := &clock{now: t0}
	r := newTestRouter(t, 91, 2, clk.Now)
	cfg := DefaultConfig()
	cfg.Clock = clk.Now
	s, err := New(cfg, bus, r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	s.Core().PeerUp(92) // one live peer: one shadow per booking
	if _, err := r.Route(router.Request{ID: "k", Tokens: prompt(1, 0, 32, 64)}); err != nil {
		t.Fatal(err)
	}
	if n, _ := loadSum(r); n != 2 {
		t.Fatalf("%d requests booked, want the request and its peer's shadow", n)
	}
	s.Core().Tick(clk.Add(cfg.ShadowTTL - time.Nanosecond))
	if n, _ := loadSum(r); n != 2 {
		t.Fatalf("%d requests booked a nanosecond before the shadow's TTL (on the router's clock), want 2", n)
	}
	s.Core().Tick(clk.Add(time.Nanosecond))
	if n, _ := loadSum(r); n != 1 {
		t.Fatalf("%d requests booked once the router's clock reached the shadow's TTL, want 1", n)
	}
	if st := s.Core().Stats(); st.ShadowsBooked != 1 || st.ShadowsExpired != 1 {
		t.Fatalf("shadows booked %d, expired %d; want 1 and 1", st.ShadowsBooked, st.ShadowsExpired)
	}
}
