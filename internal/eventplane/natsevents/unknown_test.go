package natsevents_test

import (
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// applied is the index as the consumer sees it: the naive view, plus the
// set of worker ids anything was applied for.
type applied struct {
	*view
	mu  sync.Mutex
	ids map[kvevent.WorkerID]int
}

func (a *applied) ApplyEvent(ev kvevent.Event) error {
	a.mu.Lock()
	a.ids[ev.Worker.ID]++
	a.mu.Unlock()
	return a.view.ApplyEvent(ev)
}

func (a *applied) workers() []kvevent.WorkerID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.ids))
}

// The probe of issue 21: a NATS client publishing RouterEvents for 500
// made-up worker ids. They used to be followed (a goroutine, an inbox, a
// recovery query and held events each: 310 MB that stayed). Now they are
// dropped and counted, nothing is followed or applied for them, and the
// registered worker's index is the same as without the flood.
func TestUnknownWorkerFloodIsDropped(t *testing.T) {
	srv := natstest.StartServer(t, -1, false)
	w := kvevent.WorkerRank{ID: 77}
	x := localindex.New(w, 64)
	honest, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	if err := honest.Serve(w, x); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a := &applied{view: newView(), ids: map[kvevent.WorkerID]int{}}
	var exact atomic.Bool
	cfg := natsevents.DefaultConsumerConfig()
	cfg.Recovery.QueryTimeout, cfg.Recovery.RetryWait = 2*time.Second, 50*time.Millisecond
	c, err := natsevents.NewConsumer(cfg, natstest.Connect(t, srv.ClientURL()), a, func(_ kvevent.WorkerID, s fleet.State, _ string) {
		exact.Store(s == fleet.StateExact)
	}, reg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
		ID: w.ID, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsNATS}}}})
	poll.Until(t, 5*time.Second, exact.Load, "the registered worker synced")
	stored := func(h uint64) []kvevent.Event {
		return x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}})
	}
	if err := honest.Publish(stored(1)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, func() bool { return maps.Equal(a.Get(w), truth(x)) }, "honest event applied")
	goroutines := runtime.NumGoroutine()

	forger, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	const ids, perID = 500, 4
	for i := range ids {
		var evs []kvevent.Event
		for j := range perID {
			evs = append(evs, kvevent.Event{ID: uint64(j), Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(1000 + i)}, Kind: kvevent.Stored,
				Blocks: []kvevent.Block{{EngineHash: uint64(j + 1), LocalHash: uint64(j + 100)}}})
		}
		if err := forger.Publish(evs); err != nil {
			t.Fatal(err)
		}
	}
	if err := honest.Publish(stored(2)); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 {
		return metricstest.Sum(t, reg, "kvrouter_eventplane_events_dropped_total", "reason", "unknown_worker")
	}
	poll.Until(t, 10*time.Second, func() bool { return dropped() == ids*perID }, "every forged event counted as dropped")
	poll.Until(t, 5*time.Second, func() bool { return maps.Equal(a.Get(w), truth(x)) }, "honest event after the flood applied")
	if got := c.Workers(); len(got) != 1 || got[0] != w {
		t.Fatalf("followed worker ranks %v, want only %v", got, w)
	}
	if got := a.workers(); len(got) != 1 || got[0] != w.ID {
		t.Fatalf("events applied for workers %v, want only %v", got, w.ID)
	}
	if n := runtime.NumGoroutine(); n > goroutines+10 {
		t.Fatalf("%d goroutines after the flood, %d before: state is kept for made-up ids", n, goroutines)
	}
}
