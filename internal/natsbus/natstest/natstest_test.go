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
// and WaitFor returns once the condition holds.
func TestConnectReconnectsAcrossRestart(t *testing.T) {
	s := natstest.StartServer(t, -1, false)
	var reconnects atomic.Int32
	nc := natstest.Connect(t, s.ClientURL(), nats.ReconnectHandler(func(*nats.Conn) { reconnects.Add(1) }))
	port := s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	natstest.StartServer(t, port, true)
	natstest.WaitFor(t, 10*time.Second, func() bool { return reconnects.Load() > 0 && nc.IsConnected() }, "reconnect")
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
	natstest.WaitFor(t, 10*time.Second, func() bool { return nc.IsConnected() }, "client reconnected")
	if _, err := js.Stream(ctx, "S"); err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
}
