// Package natstest is test support for packages that talk over NATS: an
// embedded server on a free loopback port and a reconnecting client (tests
// wait on them with internal/poll). Everything it starts is stopped at test cleanup, so
// tests stay goleak-clean.
//
// It exists because the same start-a-server and connect code
// was written in every event-plane test package.
package natstest

import (
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/natsbus"
)

// readyTimeout bounds how long a started server may take to accept clients.
const readyTimeout = 10 * time.Second

// StartServer runs a bare nats-server on 127.0.0.1 at port (-1: a free
// one), with JetStream stored in a fresh temporary directory when
// jetStream is set. It is shut down at cleanup; shutting it down earlier
// (to test a restart, say) is fine.
func StartServer(t testing.TB, port int, jetStream bool) *natsserver.Server {
	t.Helper()
	o := &natsserver.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true}
	if jetStream {
		o.JetStream, o.StoreDir = true, t.TempDir()
	}
	s, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(readyTimeout) {
		t.Fatal("nats server not ready")
	}
	return s
}

// StartEmbedded starts natsbus's embedded server the way kvrouter serve
// does, but on a free loopback port with JetStream in a temporary
// directory, and returns the connected Bus. It is shut down at cleanup.
func StartEmbedded(t testing.TB) *natsbus.Bus {
	t.Helper()
	c := natsbus.DefaultConfig()
	c.Port = -1
	c.DataDir = t.TempDir()
	c.ReconnectWait = 50 * time.Millisecond
	c.StartTimeout = readyTimeout
	b, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(); b.WaitForShutdown() })
	return b
}

// Connect connects to url, reconnecting forever every 50 ms unless opts
// say otherwise; the connection is closed at cleanup.
func Connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
