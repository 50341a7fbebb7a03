package replica

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Two models with different block sizes: workers 1 and 2 serve the
// default model, 3 and 4 the other.
const (
	modelA = "model-a"
	modelB = "model-b"
)

// newTestPools returns pools for router id: modelA (default, workers 1-2,
// the default block size) and modelB (workers 3-4, block size 32).
func newTestPools(t *testing.T, id uint64) *router.Pools {
	t.Helper()
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := router.DefaultConfig()
	cfg.RouterID, cfg.Seed = id, id
	p, err := router.NewPools(modelA, cfg, router.NewSerial(x), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for w, m := range map[kvevent.WorkerID]string{1: modelA, 2: modelA, 3: modelB, 4: modelB} {
		bs := cfg.BlockSize
		if m == modelB {
			bs = 32
		}
		if err := p.AddWorker(m, router.WorkerInfo{ID: w, BlockSize: bs}); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// startPoolsReplica starts replica sync for p over its own client to url.
func startPoolsReplica(t *testing.T, url string, p *router.Pools) (*Sync, *prometheus.Registry) {
	t.Helper()
	c := natsbus.DefaultConfig()
	c.URL = url
	c.ReconnectWait = 50 * time.Millisecond
	bus, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
	cfg := DefaultConfig()
	cfg.Clock = time.Now
	cfg.TTL = time.Second
	cfg.SnapshotTimeout = 500 * time.Millisecond
	reg := prometheus.NewRegistry()
	s, err := New(cfg, bus, p, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, reg
}

// poolLoad returns the active requests model's pool of p holds on each
// worker.
func poolLoad(t *testing.T, p *router.Pools, model string) map[kvevent.WorkerID]int {
	t.Helper()
	r, ok := p.Pool(model)
	if !ok {
		t.Fatalf("no pool %q", model)
	}
	out := map[kvevent.WorkerID]int{}
	for _, l := range r.Loads() {
		if l.ActiveRequests > 0 {
			out[l.Worker.ID] += l.ActiveRequests
		}
	}
	return out
}

// TestSyncSharesEveryModelPool: a booking router A makes for modelB (in
// A's start-up snapshot to B, and later as an event) lands in B's modelB
// pool on the same worker, never in its default pool, and is freed there
// when A frees it; an event naming a model B has no pool for is counted
// and dropped without making a pool.
func TestSyncSharesEveryModelPool(t *testing.T) {
	url := server(t)
	a, b := newTestPools(t, 1), newTestPools(t, 2)
	sa, _ := startPoolsReplica(t, url, a)

	// Booked before B starts: B learns it from A's snapshot.
	d0, err := a.Route(router.Request{ID: "early", Model: modelB, Tokens: prompt(1, 0, 64, 128)})
	if err != nil || (d0.Worker.ID != 3 && d0.Worker.ID != 4) {
		t.Fatalf("route early: %+v %v", d0, err)
	}
	sb, regB := startPoolsReplica(t, url, b)
	poll.Until(t, 5*time.Second, func() bool { return len(sa.Core().Peers()) == 1 && len(sb.Core().Peers()) == 1 }, "replicas know each other")
	poll.Until(t, 5*time.Second, func() bool { return poolLoad(t, b, modelB)[d0.Worker.ID] == 1 }, "snapshot booking in B's modelB pool")

	d1, err := a.Route(router.Request{ID: "late", Model: modelB, Tokens: prompt(2, 1, 64, 160)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[kvevent.WorkerID]int{d0.Worker.ID: 1}
	want[d1.Worker.ID]++
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		got := poolLoad(t, b, modelB)
		return len(got) == len(want) && got[d0.Worker.ID] == want[d0.Worker.ID] && got[d1.Worker.ID] == want[d1.Worker.ID], ""
	}, "event booking in B's modelB pool")
	if got := poolLoad(t, b, modelA); len(got) != 0 {
		t.Fatalf("B's default pool holds %v, want nothing", got)
	}

	// A prefill mark and the Frees name the pool too.
	if !a.MarkPrefillCompleted("late") || !a.Free("early") || !a.Free("late") {
		t.Fatal("mark/free on A")
	}
	poll.Until(t, 5*time.Second, func() bool { return len(poolLoad(t, b, modelB)) == 0 }, "A's Frees reach B's modelB pool")

	// An event for a model B has no pool for, from live peer A.
	data, err := AppendEvent(nil, Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 1, RequestID: "ghost",
		Model: "no-such-model", Worker: kvevent.WorkerRank{ID: 3}, BlockHashes: []uint64{1, 2}, PrefillTokens: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sa.bus.Conn().Publish(EventsSubject(sa.cfg.Namespace, sa.cfg.Component), data); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return metricstest.Sum(t, regB, "kvrouter_replica_unknown_model_total") == 1 }, "unknown-model event counted")
	if got := b.Models(); len(got) != 2 || b.Booked("ghost") {
		t.Fatalf("B after unknown-model event: models %v, ghost booked %v", got, b.Booked("ghost"))
	}
}
