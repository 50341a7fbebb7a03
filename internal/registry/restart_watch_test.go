package registry

import (
	"context"
	"net"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// TestWatchSurvivesServerRestart: after the NATS server restarts (same
// port, same store), a watcher still sees the heartbeats. It used to go
// silent for good, so a router dropped every registered worker as expired
// and never saw them again (found by internal/chaos).
func TestWatchSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	start := func(port int) *natsserver.Server {
		s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats server not ready")
		}
		return s
	}
	s := start(-1)
	port := s.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := OpenBucket[fleet.WorkerRecord](ctx, js, "restart", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// seen waits for a Put of name within d.
	seen := func(name string, d time.Duration) bool {
		deadline := time.After(d)
		for {
			select {
			case c := <-w.C():
				if c.Kind == fleet.Put && c.Value.Name == name {
					return true
				}
			case <-deadline:
				return false
			}
		}
	}
	if err := b.Put(ctx, "k", fleet.WorkerRecord{Name: "before"}); err != nil {
		t.Fatal(err)
	}
	if !seen("before", 5*time.Second) {
		t.Fatal("put before the restart not seen")
	}
	s.Shutdown()
	s.WaitForShutdown()
	s = start(port)
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	ok := false
	for i := 0; i < 40 && !ok; i++ {
		if err := b.Put(ctx, "k", fleet.WorkerRecord{Name: "after"}); err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ok = seen("after", 250*time.Millisecond)
	}
	if !ok {
		t.Fatal("the watcher saw no heartbeat in 10 s after the server restarted")
	}
}

// TestOpenBucketBounded: OpenBucket with a context without deadline gives
// up when JetStream never answers (a reply lost in a server restart). It
// used to wait for good, leaving a router stuck in start-up (found by
// internal/chaos: replica sync opening its bucket while NATS restarted).
func TestOpenBucketBounded(t *testing.T) {
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A JetStream that swallows every API request.
	sub, err := nc.Subscribe("$JS.API.>", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { openTimeout = d }(openTimeout)
	openTimeout = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := OpenBucket[fleet.WorkerRecord](context.Background(), js, "silent", time.Second, nil)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("OpenBucket against a silent JetStream succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OpenBucket still waiting 5 s after its 300 ms bound")
	}
}
