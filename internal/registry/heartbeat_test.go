package registry

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestNextRetryBounded: the waits between heartbeat retries start at
// TTL/40 and double up to TTL/10, never above a second, whatever the TTL.
func TestNextRetryBounded(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want []time.Duration
	}{
		{10 * time.Second, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}},
		{time.Second, []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}},
		{time.Minute, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, time.Second}},
	} {
		var prev time.Duration
		for i, want := range tc.want {
			prev = nextRetry(prev, tc.ttl)
			if prev != want {
				t.Fatalf("ttl %v: retry %d waits %v, want %v", tc.ttl, i+1, prev, want)
			}
		}
	}
}

// TestHeartbeatRetriesAcrossLeaderCrash is issue 21's lost heartbeat on a
// NATS cluster: a heartbeat that failed (the registry bucket's leader
// crashed) was tried again only at the next tick, TTL/3 later, so a leader
// election (4–9 s) could swallow every tick of a TTL. Now it is retried
// within a second until it lands. With a 90 s TTL (ticks 30 s apart) the
// record must be put again on the new leader well before the next tick.
func TestHeartbeatRetriesAcrossLeaderCrash(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	const ttl = 90 * time.Second
	cfg := RegistryConfig{Bucket: "hb", TTL: ttl, Replicas: 3}
	ctx := t.Context()
	admin, err := jetstream.New(natstest.Connect(t, c.URLs()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRegistry(ctx, admin, cfg, nil); err != nil {
		t.Fatal(err)
	}
	var leader *natstest.ClusterNode
	poll.Until(t, 30*time.Second, func() bool { leader = c.StreamLeader("KV_hb"); return leader != nil }, "a leader of the bucket")
	var other *natstest.ClusterNode
	for _, nd := range c.Nodes() {
		if nd != leader {
			other = nd
			break
		}
	}
	// The owner and the reader stay on a node that keeps running.
	ownerJS, err := jetstream.New(natstest.Connect(t, other.URL()))
	if err != nil {
		t.Fatal(err)
	}
	readerJS, err := jetstream.New(natstest.Connect(t, other.URL()))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := OpenRegistry(ctx, ownerJS, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	prom := prometheus.NewRegistry()
	hb, err := NewHeartbeatMetrics(prom)
	if err != nil {
		t.Fatal(err)
	}
	reg.CountHeartbeats(hb)
	l, err := reg.Register(ctx, rec("w1", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abandon()
	kicks := make(chan func(), 1)
	l.RefreshOnReconnect(func(hook func()) func() { kicks <- hook; return func() {} })
	kick := <-kicks
	kv, err := readerJS.KeyValue(ctx, "hb")
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		e, err := kv.Get(rctx, RecordKey(fleet.DeriveID("w1")))
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	before := revision()
	if before == 0 {
		t.Fatal("no record after Register")
	}

	leader.Crash()
	kick() // a heartbeat now, into the election
	poll.Until(t, 10*time.Second, func() bool {
		return metricstest.Sum(t, prom, "kvrouter_registry_heartbeat_failures_total", "bucket", "hb") >= 1
	}, "a heartbeat to fail while the bucket has no leader")
	start := time.Now()
	// The next tick is 30 s after the kick: a put before 25 s is a retry.
	poll.Until(t, 25*time.Second, func() bool { return revision() > before }, "the record put again on the new leader")
	t.Logf("record put again %v after the first failure", time.Since(start).Round(time.Millisecond))
	if n := metricstest.Sum(t, prom, "kvrouter_registry_heartbeat_retries_total", "bucket", "hb"); n < 1 {
		t.Fatalf("%v retries counted, want at least 1", n)
	}
}

// TestHeartbeatMetricsShared: a second owner in the same process (up's
// workers and its router) counts on the counters the first registered.
func TestHeartbeatMetricsShared(t *testing.T) {
	prom := prometheus.NewRegistry()
	a, err := NewHeartbeatMetrics(prom)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewHeartbeatMetrics(prom)
	if err != nil {
		t.Fatal(err)
	}
	a.failed("x")
	b.failed("x")
	b.retried("y")
	if n := metricstest.Sum(t, prom, "kvrouter_registry_heartbeat_failures_total", "bucket", "x"); n != 2 {
		t.Fatalf("failures %v, want 2", n)
	}
	if n := metricstest.Sum(t, prom, "kvrouter_registry_heartbeat_retries_total", "bucket", "y"); n != 1 {
		t.Fatalf("retries %v, want 1", n)
	}
}

// TestRegistrationSurvivesPartition: an owner whose NATS node is cut off
// from the cluster used to stay on it, every heartbeat failing, until its
// registration expired on the majority side. With the bus's failover
// watch and the lease refreshed on reconnect, the record is put again on
// the majority while the partition lasts.
func TestRegistrationSurvivesPartition(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := natsbus.DefaultConfig()
	nc.URL, nc.ReconnectWait, nc.FailoverAfter = c.URLs(), 50*time.Millisecond, time.Second
	bus, err := natsbus.Start(nc, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
	ctx := t.Context()
	cfg := RegistryConfig{Bucket: "part", TTL: 30 * time.Second, Replicas: 3}
	reg, err := OpenRegistry(ctx, bus.JetStream(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := reg.Register(ctx, rec("w1", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abandon()
	l.RefreshOnReconnect(bus.OnReconnect)
	cut := c.NodeByURL(bus.Conn().ConnectedUrl())
	var reader *natstest.ClusterNode
	for _, nd := range c.Nodes() {
		if nd != cut {
			reader = nd
			break
		}
	}
	readerJS, err := jetstream.New(natstest.Connect(t, reader.URL()))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := readerJS.KeyValue(ctx, "part")
	if err != nil {
		t.Fatal(err)
	}
	revision := func() uint64 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		e, err := kv.Get(rctx, RecordKey(fleet.DeriveID("w1")))
		if err != nil {
			return 0
		}
		return e.Revision()
	}
	before := revision()
	if before == 0 {
		t.Fatal("no record after Register")
	}
	cut.Isolate()
	// No put lands through the isolated node (no quorum): a new revision
	// is a put on the majority side, after a move. (If the bucket's leader
	// was the isolated node, the majority elects another one first.)
	poll.Until(t, 25*time.Second, func() bool { return revision() > before }, "the record put again on the majority side")
	if bus.Conn().ConnectedUrl() == cut.URL() {
		t.Fatal("the owner is still on the isolated node")
	}
}
