package natsbus_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestFailoverLeavesPartitionedNode is issue 21's stranded client: a NATS
// node cut off from the rest of its cluster keeps its clients (it still
// answers their pings), and with no JetStream quorum every heartbeat,
// watch and consumer through it stalled until the partition healed. The
// bus now moves to a node where JetStream answers.
func TestFailoverLeavesPartitionedNode(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	cfg := natsbus.DefaultConfig()
	cfg.URL, cfg.ReconnectWait, cfg.FailoverAfter = c.URLs(), 50*time.Millisecond, time.Second
	b, err := natsbus.Start(cfg, slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(); b.WaitForShutdown() })
	reconnected := make(chan struct{}, 1)
	b.OnReconnect(func() {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	})
	ctx := t.Context()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "fo", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	first := c.NodeByURL(b.Conn().ConnectedUrl())
	if first == nil {
		t.Fatalf("connected to %s, not a node of the cluster", b.Conn().ConnectedUrl())
	}
	first.Isolate()
	cut := time.Now()
	put := func() bool {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := kv.Put(pctx, "k", []byte("v"))
		return err == nil
	}
	poll.UntilState(t, 30*time.Second, func() (bool, string) {
		now := b.Conn().ConnectedUrl()
		if now == first.URL() {
			return false, "still on the isolated node " + first.Name()
		}
		if !put() {
			return false, "on " + now + ", a put does not land"
		}
		return true, ""
	}, "the bus to move off the isolated node and JetStream to answer")
	t.Logf("moved off %s and put %v after the partition", first.Name(), time.Since(cut).Round(time.Millisecond))
	if n := b.Failovers(); n < 1 {
		t.Fatalf("%d failovers counted", n)
	}
	// The client runs reconnect hooks on its own callback goroutine, so
	// the hook may run just after the put that proved the move: wait for it.
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the move ran no reconnect hook in 10 s (owners would not refresh their state)")
	}
}
