package natstest

import (
	"fmt"
	"net"
	"testing"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Restartable is a nats-server on 127.0.0.1 that a test can stop and start
// again on the same port with the same JetStream store: what clients see
// across an outage or a server restart. It is not safe for concurrent use
// by several goroutines of the test.
type Restartable struct {
	t    testing.TB
	dir  string
	port int
	srv  *natsserver.Server
}

// StartRestartable starts a Restartable with JetStream on a free port. It
// is stopped at cleanup.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	n := &Restartable{t: t, dir: t.TempDir(), port: -1}
	n.Start(true)
	t.Cleanup(n.Stop)
	return n
}

// Start starts the server on its port if it is stopped, with JetStream on
// the same store when jetStream is set (without it, a client's JetStream
// requests find no responder: a server restarting before its JetStream
// is up).
func (n *Restartable) Start(jetStream bool) {
	n.t.Helper()
	if n.srv != nil {
		return
	}
	o := &natsserver.Options{Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true}
	if jetStream {
		o.JetStream, o.StoreDir = true, n.dir
	}
	s, err := natsserver.NewServer(o)
	if err != nil {
		n.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyTimeout) {
		s.Shutdown()
		n.t.Fatal("nats server not ready")
	}
	n.srv, n.port = s, s.Addr().(*net.TCPAddr).Port
}

// Stop shuts the server down and waits for it; stopping a stopped server
// does nothing.
func (n *Restartable) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Port is the server's port, the same across restarts.
func (n *Restartable) Port() int { return n.port }

// URL is the server's client URL, the same across restarts.
func (n *Restartable) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Server is the running server, nil while stopped.
func (n *Restartable) Server() *natsserver.Server { return n.srv }
