package zmqevents_test

import (
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// The frame bomb of issue 21 against both ends of the ZMQ event plane: a
// peer announcing a 1 GiB frame in the handshake is dropped at the header
// (unguarded, zmq4 allocated the claim and waited for the body), the
// consumer counts it, and an honest worker's events still reach the index.
func TestEventPlaneSurvivesFrameBombs(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := kvevent.WorkerRank{ID: 5}
	x := localindex.New(w, 32)
	_ = p.Serve(w, x)

	// The worker's sockets, bombed by a peer that connects to them.
	before := zmtptest.Allocated()
	zmtptest.BombDial(t, strings.TrimPrefix(p.Endpoint(), "tcp://"), zmtptest.BombSize)
	zmtptest.BombDial(t, strings.TrimPrefix(p.QueryEndpoint(), "tcp://"), zmtptest.BombSize)

	// The router's sockets, dialling a worker record whose endpoints bomb.
	subBomb := zmtptest.NewListener(t, zmtptest.BombSize)
	defer subBomb.Close()
	queryBomb := zmtptest.NewListener(t, zmtptest.BombSize)
	defer queryBomb.Close()
	reg := prometheus.NewRegistry()
	v := &view{}
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry = 20 * time.Millisecond
	cfg.Recovery.RetryWait = 20 * time.Millisecond
	c, err := zmqevents.NewConsumer(cfg, v, nil, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := func(id kvevent.WorkerID, events, replay string) {
		c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
			ID: id, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: events, Replay: replay}}}})
	}
	add(6, subBomb.Endpoint(), "")             // SUB handshake bombed
	add(7, p.Endpoint(), queryBomb.Endpoint()) // recovery query bombed
	add(w.ID, p.Endpoint(), p.QueryEndpoint()) // honest
	for name, l := range map[string]*zmtptest.Listener{"SUB": subBomb, "query DEALER": queryBomb} {
		select {
		case <-l.Dropped:
		case <-l.Late:
			t.Fatalf("the consumer's %s kept a bombed connection open", name)
		case <-time.After(15 * time.Second):
			t.Fatalf("the consumer's %s never dialled", name)
		}
	}
	if grown := zmtptest.Allocated() - before; grown > zmtptest.BombSize/2 {
		t.Fatalf("%d MiB allocated while bombs announcing %d MiB were played", grown>>20, zmtptest.BombSize>>20)
	}
	poll.Until(t, 5*time.Second, func() bool {
		return metricstest.Sum(t, reg, "kvrouter_eventplane_frames_refused_total") >= 2
	}, "both refusals counted")

	time.Sleep(100 * time.Millisecond) // let the SUB socket connect (slow joiner)
	for h := range uint64(3) {
		if err := p.Publish(x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}})); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, func() bool { return len(truth(x)) == 3 && maps.Equal(v.Get(w), truth(x)) }, "the honest worker's events applied")
}

// A worker's port taken over by a peer that accepts and closes every
// connection: the consumer redials with a growing pause (zmq4's automatic
// reconnect used to redial from inside the failed handshake, thousands of
// times a second, until the stack overflowed), and follows the worker
// again once a real publisher is back on the port.
func TestConsumerRedialsAfterHostileTakeover(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newPub := func(ep, qep string) *zmqevents.Publisher {
		p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: ep, QueryEndpoint: qep, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newPub("tcp://127.0.0.1:0", "tcp://127.0.0.1:0")
	ep, qep := p.Endpoint(), p.QueryEndpoint()
	w := kvevent.WorkerRank{ID: 9}
	x := localindex.New(w, 32)
	_ = p.Serve(w, x)
	v := &view{}
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry, cfg.Recovery.RetryWait = 20*time.Millisecond, 20*time.Millisecond
	c, err := zmqevents.NewConsumer(cfg, v, nil, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
		ID: w.ID, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: ep, Replay: qep}}}})
	defer func() { _ = c.Close(); _ = p.Close() }()
	stored := func(h uint64) []kvevent.Event {
		return x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}})
	}
	// followed publishes one event a call until the view holds every
	// event published after the first since: it looks before it
	// publishes, so the event it waits for is one published a poll
	// interval ago (comparing right after a Publish raced the consumer's
	// delivery and could fail every time on an idle machine).
	h := uint64(0)
	followed := func(since uint64) func() bool {
		return func() bool {
			if h > since && maps.Equal(v.Get(w), truth(x)) {
				return true
			}
			h++
			_ = p.Publish(stored(h))
			return false
		}
	}
	// The first dial and handshake, on a loaded machine.
	poll.Until(t, 15*time.Second, followed(0), "the worker followed")

	_ = p.Close()
	ln, err := net.Listen("tcp", strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		t.Skipf("port of the closed publisher not free again: %v", err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.Close()
		}
	}()
	poll.Until(t, 5*time.Second, func() bool { return accepted.Load() >= 4 }, "redials to the hostile peer")
	time.Sleep(time.Second)
	if n := accepted.Load(); n > 12 {
		t.Fatalf("%d connections in about 1.5 s: the consumer redials without pause", n)
	}
	_ = ln.Close()

	p = newPub(ep, qep)
	_ = p.Serve(w, x)
	poll.Until(t, 15*time.Second, followed(h), "the worker followed again")
}
