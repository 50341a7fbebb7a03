package natsevents_test

import (
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// Event ids count from 0 (issue 6). A router follows a worker before its
// first event: the initial dump says "no event yet" (last_event_id nil on
// the wire), so the live event 0 is applied, and when event 1 is lost,
// event 2 reveals the gap 1..1, repaired by request/reply with no later
// event or resync.
func TestNATSFirstEventIsIDZero(t *testing.T) {
	srv := natstest.StartServer(t, -1, false)
	w := kvevent.WorkerRank{ID: 77}
	x := localindex.New(w, 32)
	p, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Serve(w, x); err != nil {
		t.Fatal(err)
	}
	v := newView()
	var exact atomic.Bool
	c := newConsumer(t, natstest.Connect(t, srv.ClientURL()), v, nil, func(_ kvevent.WorkerID, s fleet.State, _ string) {
		exact.Store(s == fleet.StateExact)
	})
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
		ID: w.ID, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsNATS}}}})
	poll.Until(t, 5*time.Second, exact.Load, "initial (empty) dump applied")
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
