package zmqevents_test

import (
	"io"
	"log/slog"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// Event ids count from 0 (issue 6). A router follows a worker before its
// first event: the initial dump says "no event yet", so the live event 0
// is applied (not taken for a duplicate of a "last id 0"), and when event
// 1 is lost, event 2 reveals the gap 1..1, repaired over the ROUTER socket
// with no later event or resync.
func TestZMQFirstEventIsIDZero(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := kvevent.WorkerRank{ID: 77}
	x := localindex.New(w, 32)
	if err := p.Serve(w, x); err != nil {
		t.Fatal(err)
	}
	v := &view{}
	var exact atomic.Bool
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry = 20 * time.Millisecond
	c, err := zmqevents.NewConsumer(cfg, v, func(_ kvevent.WorkerID, s fleet.State, _ string) {
		exact.Store(s == fleet.StateExact)
	}, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
		ID: w.ID, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ,
			Endpoint: p.Endpoint(), Replay: p.QueryEndpoint()}}}})
	poll.Until(t, 5*time.Second, exact.Load, "initial (empty) dump applied")
	time.Sleep(100 * time.Millisecond) // let the SUB socket connect (slow joiner)
	stored := func(h uint64) []kvevent.Event {
		return x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}})
	}
	ev0 := stored(1)
	if ev0[0].ID != 0 {
		t.Fatalf("first id %d, want 0", ev0[0].ID)
	}
	if err := p.Publish(ev0); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return maps.Equal(v.Get(w), truth(x)) }, "event 0 applied")
	stored(2) // event 1: lost
	if err := p.Publish(stored(3)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return maps.Equal(v.Get(w), truth(x)) }, "gap 1..1 repaired")
}
