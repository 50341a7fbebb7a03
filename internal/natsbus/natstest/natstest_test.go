package natstest_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartEmbeddedServesCoreAndJetStream(t *testing.T) {
	b := natstest.StartEmbedded(t)
	nc := natstest.Connect(t, b.ClientURL())
	sub, err := nc.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Publish("x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v, %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"}); err != nil {
		t.Fatal(err)
	}
}

// A client made by Connect follows a server restarted on the same port,
// and poll.Until sees it reconnected.
func TestConnectReconnectsAcrossRestart(t *testing.T) {
	s := natstest.StartServer(t, -1, false)
	var reconnects atomic.Int32
	nc := natstest.Connect(t, s.ClientURL(), nats.ReconnectHandler(func(*nats.Conn) { reconnects.Add(1) }))
	port := s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	natstest.StartServer(t, port, true)
	poll.Until(t, 10*time.Second, func() bool { return reconnects.Load() > 0 && nc.IsConnected() }, "reconnect")
}

// TestRestartableKeepsPortAndStore: a Restartable comes back on the same
// port, and with JetStream its streams survive the restart.
func TestRestartableKeepsPortAndStore(t *testing.T) {
	n := natstest.StartRestartable(t)
	port := n.Port()
	nc := natstest.Connect(t, n.URL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	n.Stop()
	if n.Server() != nil {
		t.Fatal("Server() not nil after Stop")
	}
	n.Stop() // stopping twice is fine
	n.Start(true)
	if n.Port() != port || n.Server() == nil {
		t.Fatalf("restarted on port %d (was %d), server %v", n.Port(), port, n.Server())
	}
	poll.Until(t, 10*time.Second, func() bool { return nc.IsConnected() }, "client reconnected")
	if _, err := js.Stream(ctx, "S"); err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
}

// TestClusterFailover: a three-node cluster forms with one meta leader;
// an R3 stream outlives the crash of its leader (another node takes over,
// a publish is acknowledged meanwhile) and the clean stop of the meta
// leader; a restarted node rejoins; an isolated node keeps its clients
// but no message crosses to the others and its JetStream acknowledges
// nothing, and it rejoins when healed.
func TestClusterFailover(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := natstest.Connect(t, c.URLs())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	var lead *natstest.ClusterNode
	poll.Until(t, 20*time.Second, func() bool { lead = c.StreamLeader("S"); return lead != nil }, "a stream leader")
	publish := func(what string) { t.Helper(); publishOn(t, js, what) }
	// After a restart, the next fault is a single fault only once every
	// replica of the stream is current again (StreamCurrent): without the
	// wait, the partition below could isolate the stream's leader while
	// the restarted node's replica still lagged, leaving the majority no
	// quorum (seen once in CI: no publish acknowledged in 20 s).
	current := func(after string) {
		t.Helper()
		poll.UntilState(t, 30*time.Second, func() (bool, string) { return natstest.StreamCurrent(ctx, js, "S") }, "every replica of the stream current after "+after)
	}
	publish("before")
	lead.Crash()
	publish("stream leader crashed")
	poll.Until(t, 20*time.Second, func() bool { l := c.StreamLeader("S"); return l != nil && l != lead }, "a new stream leader")
	lead.Start()
	c.WaitFormed(30 * time.Second)
	current("the stream leader's restart")

	meta := c.MetaLeader()
	if meta == nil {
		t.Fatal("formed without a meta leader")
	}
	meta.Stop()
	poll.Until(t, 20*time.Second, func() bool { m := c.MetaLeader(); return m != nil && m != meta }, "a new meta leader")
	publish("meta leader down")
	meta.Start()
	c.WaitFormed(30 * time.Second)
	current("the meta leader's restart")

	// Core NATS crosses the routes before the partition (the positive
	// signal), not during it; a client of the isolated node stays on it.
	iso, other := c.Node(0), c.Node(1)
	isoNC := natstest.Connect(t, iso.URL())
	otherNC := natstest.Connect(t, other.URL())
	sub, err := otherNC.SubscribeSync("p")
	if err != nil {
		t.Fatal(err)
	}
	crosses := func() bool {
		t.Helper()
		if err := isoNC.Publish("p", []byte("x")); err != nil {
			t.Fatal(err)
		}
		_, err := sub.NextMsg(time.Second)
		return err == nil
	}
	poll.Until(t, 10*time.Second, crosses, "a message from n1's client to n2's before the partition")
	iso.Isolate()
	if !iso.Running() || !isoNC.IsConnected() {
		t.Fatal("isolated node or its client down")
	}
	if crosses() {
		t.Fatal("a message crossed the partition")
	}
	c.WaitFormed(30 * time.Second) // the other two, with a leader between them
	otherJS, err := jetstream.New(otherNC)
	if err != nil {
		t.Fatal(err)
	}
	publishOn(t, otherJS, "one node isolated")
	isoJS, err := jetstream.New(isoNC)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	if _, err := isoJS.Publish(pctx, "s.x", []byte("minority")); err == nil {
		t.Error("a publish on the isolated node was acknowledged")
	}
	cancel()
	iso.Heal()
	c.WaitFormed(30 * time.Second)
	poll.Until(t, 10*time.Second, crosses, "a message crossing again after the heal")
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	current("the heal")
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 4 {
		t.Fatalf("stream after the faults: %v, %v; want the 4 acknowledged messages", info, err)
	}
}

// publishOn publishes what on s.x until one publish is acknowledged (a
// retry is deduplicated by its message id).
func publishOn(t *testing.T, js jetstream.JetStream, what string) {
	t.Helper()
	poll.Until(t, 20*time.Second, func() bool {
		pctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "s.x", []byte(what), jetstream.WithMsgID(what))
		return err == nil
	}, "an acknowledged publish: "+what)
}
