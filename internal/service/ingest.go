package service

import (
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// transport names what carried a KV event to the router.
type transport uint8

const (
	// transportEngine: an engine's own vLLM-format ZMQ stream (vllmzmq).
	transportEngine transport = iota
	// transportNATS: RouterEvents on core NATS (natsevents).
	transportNATS
	// transportDurable: RouterEvents read from the JetStream stream, or
	// its snapshot (durable).
	transportDurable
	// transportZMQ: RouterEvents over ZMQ, no NATS (zmqevents).
	transportZMQ
	numTransports
)

var transportNames = [numTransports]string{"engine", "nats", "durable", "zmq"}

func (t transport) String() string { return transportNames[t] }

// applier is the one way a KV event enters the index, whatever transport
// carried it: every transport's decoded events (and the events its
// recovery replays) are handed to an applier, which applies them through
// the router core and records that their worker is alive (the silence
// watchdog's clock). One applier per transport, so that the events each
// brought are counted (kvrouter_kv_events_ingested_total).
type applier struct {
	router  eventRouter
	workers *workerSet
	count   *atomic.Uint64 // events this transport handed in
}

// The event plane's consumers (natsevents, zmqevents, durable, through
// their recovery tracker) take a recovery.Applier; the engines' streams
// reach it through their rank's vllmzmq.Handler (rankState.Apply).
var _ recovery.Applier = applier{}

// ApplyEvent implements recovery.Applier: ev goes to the index through
// the router core and its worker is marked alive (ids the worker set does
// not know, e.g. publishers discovery never announced, only the former).
// The error is the index's refusal, if any.
func (a applier) ApplyEvent(ev kvevent.Event) error {
	a.count.Add(1)
	err := a.router.ApplyEvent(ev)
	a.workers.touched(ev.Worker.ID)
	if ev.LoRAName != "" && a.workers.adapters != nil {
		a.workers.adapters.note(ev.Worker.ID, ev.LoRAName)
	}
	return err
}

// applier returns transport t's applier: the router core and this worker
// set's liveness, counted under t.
func (s *workerSet) applier(t transport) applier {
	return applier{router: s.router, workers: s, count: &s.ingested[t]}
}
