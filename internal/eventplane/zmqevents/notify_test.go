package zmqevents_test

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// silentListener accepts TCP connections and never answers: a worker
// endpoint that holds a ZMTP handshake open. It is closed at cleanup.
type silentListener struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newSilentListener(t *testing.T) *silentListener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentListener{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.wg.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			_ = c.Close()
		}
	})
	return s
}

func (s *silentListener) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

func (s *silentListener) endpoint() string { return "tcp://" + s.ln.Addr().String() }

// TestNotifyDoesNotWaitForASilentEndpoint is issue 21's blocked
// directory: Notify dialled a worker's event endpoint under the
// consumer's lock, and a dial waits for the peer's ZMTP greeting, so one
// endpoint that accepted and never answered held Notify, and with it
// every other worker's Added and Removed and the consumer's Close. Now a
// worker behind such an endpoint costs only its own follower: another
// worker added after it is followed, and removing it returns.
func TestNotifyDoesNotWaitForASilentEndpoint(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	good := kvevent.WorkerRank{ID: 61}
	if err := p.Serve(good, localindex.New(good, 32)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	exact := map[kvevent.WorkerID]bool{}
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry = 20 * time.Millisecond
	c, err := zmqevents.NewConsumer(cfg, &view{}, func(id kvevent.WorkerID, s fleet.State, _ string) {
		mu.Lock()
		exact[id] = s == fleet.StateExact
		mu.Unlock()
	}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	silent := newSilentListener(t) // closed before the consumer, should a dial still hang on it
	added := func(id kvevent.WorkerID, ev, replay string) fleet.Notification {
		return fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
			ID: id, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: ev, Replay: replay}}}}
	}
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		c.Notify(added(60, silent.endpoint(), silent.endpoint()))
		c.Notify(added(good.ID, p.Endpoint(), p.QueryEndpoint()))
	}()
	poll.Until(t, 5*time.Second, func() bool { return silent.accepted() > 0 }, "the silent endpoint to accept the dial")
	poll.Until(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return exact[good.ID]
	}, "the worker added after the silent one followed (its dump applied)")
	<-notified
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		c.Notify(fleet.Notification{Kind: fleet.Removed, Worker: fleet.Worker{Record: fleet.WorkerRecord{ID: 60}}})
	}()
	select {
	case <-removed:
	case <-time.After(10 * time.Second):
		t.Fatal("removing the worker behind the silent endpoint did not return")
	}
}
