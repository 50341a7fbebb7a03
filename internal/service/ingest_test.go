package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestOneIngestionPath: whatever carries a worker's KV events (its
// engine's vLLM ZMQ stream, RouterEvents on core NATS, the durable
// JetStream stream, RouterEvents over ZMQ), every event the index is given
// went through that transport's applier: its count equals the index's own
// count of the events it was given, and no other transport's applier saw
// one. An event each worker publishes later moves that worker's liveness
// (the silence watchdog's clock) past the moment it was sent. In durable
// mode, a second router that restores the first one's snapshot at start
// applies it through its applier too.
func TestOneIngestionPath(t *testing.T) {
	for _, tc := range []struct {
		via     transport
		plane   string
		durable bool
	}{
		{transportEngine, "", false},
		{transportNATS, config.PlaneNATS, false},
		{transportDurable, config.PlaneNATS, true},
		{transportZMQ, config.PlaneZMQ, false},
	} {
		t.Run(tc.via.String(), func(t *testing.T) {
			o := rigOpt{workers: 2, plane: tc.plane}
			if tc.durable {
				o.cfg = func(c *config.Config) {
					c.EventPlane.Durable = true
					c.EventPlane.SnapshotThreshold = 5
					c.Router.ID = 7
				}
			}
			r := newRig(t, o)
			r.waitExact()
			r.matchEngines(prompts(6, 9), tc.plane == config.PlaneZMQ)
			r.onlyThrough(tc.via)
			r.aliveAfterEvents()
			r.onlyThrough(tc.via)
			if tc.durable {
				r.restoredThroughApplier()
			}
		})
	}
}

// onlyThrough waits until every event the index was given is counted by
// via's applier, and checks no other transport's applier counted any.
func (r *rig) onlyThrough(via transport) {
	r.t.Helper()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		n := r.metric("kvrouter_kv_events_ingested_total", "transport", via.String())
		all := r.metric("kvrouter_kv_events_ingested_total")
		if err := r.svc.Index().Flush(); err != nil {
			return false, err.Error()
		}
		given := r.metric("kvrouter_index_events_total")
		return n > 0 && n == all && n == given, fmt.Sprintf("%s applier %v, all appliers %v, index given %v", via, n, all, given)
	}, "every event the index was given counted by the "+via.String()+" applier")
}

// aliveAfterEvents sends every worker a request of its own (not through
// the router) and waits until the event it publishes marks it alive.
func (r *rig) aliveAfterEvents() {
	r.t.Helper()
	sent := time.Now()
	for i, w := range r.fleet.Workers {
		r.direct(w, nudgePrompt(uint32(900+i)))
	}
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		ws := r.svc.workers
		ws.mu.Lock()
		defer ws.mu.Unlock()
		if len(ws.byID) != len(r.fleet.Workers) {
			return false, fmt.Sprintf("%d workers known", len(ws.byID))
		}
		for _, w := range ws.byID {
			if last := time.Unix(0, w.lastEvent.Load()); last.Before(sent) {
				return false, fmt.Sprintf("%s last alive %v before the request at %v", w.name, last, sent)
			}
		}
		return true, ""
	}, "every worker's new event marks it alive")
}

// restoredThroughApplier waits for r's snapshot, then starts a second
// durable router on r's NATS: it restores the snapshot at start, and every
// event its index was given went through its durable applier.
func (r *rig) restoredThroughApplier() {
	t := r.t
	t.Helper()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		n := r.metric("kvrouter_durable_snapshots_total")
		return n > 0, fmt.Sprintf("%v snapshots", n)
	}, "a snapshot written")
	r2, stop := r.secondRouter(8)
	defer stop()
	r2.waitExact()
	if n := r2.metric("kvrouter_durable_restores_total"); n != 1 {
		t.Fatalf("second router restored %v snapshots, want 1", n)
	}
	r2.onlyThrough(transportDurable)
}
