package vllmzmq

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// hostPort strips the scheme of a tcp:// endpoint.
func hostPort(ep string) string { return strings.TrimPrefix(ep, "tcp://") }

// noBombAllocation fails t if more than half the bomb's announced size was
// allocated since before: zmq4 unguarded allocates the whole claim.
func noBombAllocation(t *testing.T, before uint64) {
	t.Helper()
	if grown := zmtptest.Allocated() - before; grown > zmtptest.BombSize/2 {
		t.Fatalf("%d MiB allocated while the bomb (announcing %d MiB) was played", grown>>20, zmtptest.BombSize>>20)
	}
}

// TestPublisherSurvivesFrameBomb replays the probe of a mock worker's ports
// (issue 21): a peer connects to the bound PUB and to the replay ROUTER,
// sends the greeting and a command header announcing 1 GiB. Unguarded,
// zmq4 allocated the claim (with 06 00 00 01 …, 1 TiB: out of memory) and
// waited for the body. Now both connections are dropped at the header,
// and an honest subscriber still gets live batches and replays.
func TestPublisherSurvivesFrameBomb(t *testing.T) {
	f := start(t, newPublisher(t, loopback()), true)
	before := zmtptest.Allocated()
	zmtptest.BombDial(t, hostPort(f.pub.Endpoint()), zmtptest.BombSize)
	zmtptest.BombDial(t, hostPort(f.pub.ReplayEndpoint()), zmtptest.BombSize)
	// Peers only send subscriptions and replay requests here: the default
	// cap is 64 KiB, so even a modest claim is refused.
	zmtptest.BombDial(t, hostPort(f.pub.Endpoint()), 100<<10)
	zmtptest.BombDial(t, hostPort(f.pub.ReplayEndpoint()), 100<<10)
	// And after a complete handshake, as a subscriber or a replay client.
	zmtptest.SendDial(t, hostPort(f.pub.Endpoint()), zmtptest.HandshakeBomb("SUB", zmtptest.BombSize))
	zmtptest.SendDial(t, hostPort(f.pub.ReplayEndpoint()), zmtptest.HandshakeBomb("DEALER", zmtptest.BombSize))
	noBombAllocation(t, before)

	f.publish(t, 0, FaultNone)
	f.publish(t, 1, FaultDropLive) // only replay can deliver it
	f.publish(t, 2, FaultNone)
	f.waitSeq(t, 2)
	_, evs, _ := f.rec.snapshot()
	if len(evs) != 3 || evs[1].Blocks[0].EngineHash != storedEvent(1).Blocks[0].EngineHash {
		t.Fatalf("honest subscriber got %d events %v, want batches 0–2 (1 by replay)", len(evs), evs)
	}
	if n := metricstest.Sum(t, f.reg, "kvrouter_vllm_events_replays_total", "result", "ok"); n < 2 {
		t.Fatalf("%v successful replays, want the initial one and the gap's", n)
	}
}

// TestSubscriberSurvivesHostilePublisher: the router's SUB dials a
// "publisher" that answers the handshake with the bomb. The connection is
// dropped and counted, the subscriber keeps retrying, and once a real
// publisher takes the port over, its batches flow.
func TestSubscriberSurvivesHostilePublisher(t *testing.T) {
	hostile := zmtptest.NewListener(t, zmtptest.BombSize)
	ep := hostile.Endpoint()
	f := &fixture{rec: &recorder{}}
	m, reg := newMetrics(t)
	f.reg = reg
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize, cfg.Metrics = worker, ep, testTopic, 4, m
	cfg.DialRetry, cfg.Logger = 20*time.Millisecond, quiet
	sub, err := NewSubscriber(cfg, f.rec)
	if err != nil {
		t.Fatal(err)
	}
	f.sub = sub
	before := zmtptest.Allocated()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	var p *Publisher
	defer func() {
		// Subscriber first, publisher after (see start).
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if p != nil {
			_ = p.Close()
		}
	}()
	for i := range 2 { // the first handshake, and a retry
		select {
		case <-hostile.Dropped:
		case <-hostile.Late:
			t.Fatalf("connection %d: the subscriber kept a bombed connection open", i)
		case <-time.After(15 * time.Second):
			t.Fatalf("connection %d: the subscriber did not dial", i)
		}
	}
	noBombAllocation(t, before)
	poll.Until(t, 10*time.Second, func() bool {
		return metricstest.Sum(t, f.reg, "kvrouter_vllm_events_frames_refused_total", "worker", "42") >= 2
	}, "refusals counted")

	_ = hostile.Close()
	pc := DefaultPublisherConfig()
	pc.Endpoint, pc.Topic = ep, testTopic
	p = newPublisher(t, pc)
	i := 0
	poll.Until(t, 10*time.Second, func() bool {
		f.pub = p
		f.publish(t, i, FaultNone)
		i++
		return sub.Status().HasSeq
	}, "a batch from the real publisher")
	if st := sub.Status(); st.State != StateExact {
		t.Fatalf("state %v (%s), want EXACT", st.State, st.Reason)
	}
}

// TestReplaySurvivesHostileRouter: the replay DEALER dials a "ROUTER" that
// answers with the bomb; Replay fails quickly with the connection dropped.
func TestReplaySurvivesHostileRouter(t *testing.T) {
	hostile := zmtptest.NewListener(t, zmtptest.BombSize)
	defer hostile.Close()
	before := zmtptest.Allocated()
	r := &dealerReplayer{endpoint: hostile.Endpoint(), retry: 20 * time.Millisecond, timeout: 5 * time.Second, log: quiet}
	err := r.Replay(context.Background(), 0, func(uint64, []byte) bool {
		t.Error("fn called by a hostile peer")
		return true
	})
	if err == nil {
		t.Fatal("Replay against a bombing peer returned no error")
	}
	select {
	case <-hostile.Dropped:
	case <-hostile.Late:
		t.Fatal("the replay connection was kept open after the bomb")
	case <-time.After(15 * time.Second):
		t.Fatal("the hostile listener saw no connection")
	}
	noBombAllocation(t, before)
}

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// TestSubscriberFrameCapIsConfigurable: with MaxFrameBytes 4096, a batch
// of 8 KiB drops the SUB connection (counted) instead of being read; the
// socket reconnects and later batches flow again.
func TestSubscriberFrameCapIsConfigurable(t *testing.T) {
	p := newPublisher(t, loopback())
	m, reg := newMetrics(t)
	rec := &recorder{}
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize, cfg.Metrics = worker, p.Endpoint(), testTopic, 4, m
	cfg.DialRetry, cfg.Logger, cfg.MaxFrameBytes = 20*time.Millisecond, quiet, 4096
	sub, err := NewSubscriber(cfg, rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_ = p.Close()
	}()
	f := &fixture{pub: p, rec: rec, sub: sub, reg: reg}
	i := 0
	poll.Until(t, 10*time.Second, func() bool {
		f.publish(t, i, FaultNone)
		i++
		return sub.Status().HasSeq
	}, "a first batch")
	big, err := p.PublishPayload(make([]byte, 8<<10), FaultNone)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool {
		return metricstest.Sum(t, f.reg, "kvrouter_vllm_events_frames_refused_total") >= 1
	}, "the oversized batch refused")
	poll.Until(t, 10*time.Second, func() bool {
		f.publish(t, i, FaultNone)
		i++
		st := sub.Status()
		return st.HasSeq && st.LastSeq > big
	}, "batches after the oversized one")
}

// TestHandBuiltHandshakeIsAccepted checks the hostile peer's handshake
// (zmtptest.Ready): a publisher takes it for a real subscriber, whose
// subscription it then records, so the post-handshake bombs above do get
// past the handshake.
func TestHandBuiltHandshakeIsAccepted(t *testing.T) {
	p := newPublisher(t, loopback())
	defer p.Close()
	c, err := net.Dial("tcp", hostPort(p.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hello := append(zmtptest.Greeting(), zmtptest.Ready("SUB")...)
	hello = append(hello, 0, byte(1+len("hand-built")), 1)
	if _, err := c.Write(append(hello, "hand-built"...)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool {
		return slices.Contains(p.pub.(zmq4.Topics).Topics(), "hand-built")
	}, "the hand-built subscription")
}

// TestSubscriberSurvivesClosingPeer: a peer that accepts every connection
// and closes it at once. zmq4's automatic reconnect dialled again from
// inside the failed handshake's error path, with no pause: thousands of
// connections a second and a stack that grew until the process died
// ("goroutine stack exceeds 1000000000-byte limit"). The subscriber now
// redials itself, with a growing pause.
func TestSubscriberSurvivesClosingPeer(t *testing.T) {
	peer := newClosingPeer(t, "127.0.0.1:0")
	accepted := &peer.accepted
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize = worker, "tcp://"+peer.ln.Addr().String(), testTopic, 4
	cfg.DialRetry, cfg.Logger = 20*time.Millisecond, quiet
	sub, err := NewSubscriber(cfg, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	// 20 ms doubling: connections at about 0, 20, 60, 140, 300, 620 ms.
	poll.Until(t, 10*time.Second, func() bool { return accepted.Load() >= 5 }, "five connections")
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := accepted.Load(); n > 12 {
		t.Fatalf("%d connections in about 1.5 s: the subscriber redials without pause", n)
	}
}

// TestPublisherBoundsWhatASubscriberSends: zmq4 keeps every topic a
// subscriber sends for as long as its connection lives, so a stranger
// sending subscriptions of 60 KiB each (under the frame cap) would grow
// the publisher by what it sends. The PUB drops a connection past 1 MiB.
func TestPublisherBoundsWhatASubscriberSends(t *testing.T) {
	p := newPublisher(t, loopback())
	defer p.Close()
	c, err := net.Dial("tcp", hostPort(p.Endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stream := append(zmtptest.Greeting(), zmtptest.Ready("SUB")...)
	for i := range 40 { // 2.4 MiB of distinct topics
		topic := bytes.Repeat([]byte{byte('a' + i%26)}, 60<<10)
		topic[0] = byte(i)
		stream = append(stream, zmtptest.LongHeader(0, uint64(1+len(topic)))...)
		stream = append(append(stream, 1), topic...)
	}
	go func() { _, _ = c.Write(stream) }() // fails once the PUB drops us
	zmtptest.WaitDropped(t, c, 10*time.Second)
	if n := len(p.pub.(zmq4.Topics).Topics()); n > 20 {
		t.Fatalf("the publisher kept %d topics of 60 KiB from one connection", n)
	}
}

// closingPeer is a peer that is not a publisher: it accepts every
// connection on its address and closes it at once, counting them.
type closingPeer struct {
	ln       net.Listener
	accepted atomic.Int64
	done     chan struct{}
	stop     func()
}

// newClosingPeer listens on addr until close or the end of the test.
func newClosingPeer(t *testing.T, addr string) *closingPeer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &closingPeer{ln: ln, done: make(chan struct{})}
	p.stop = sync.OnceFunc(func() { _ = ln.Close(); <-p.done })
	go func() {
		defer close(p.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(p.stop)
	return p
}
