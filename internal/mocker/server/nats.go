package server

import (
	"errors"
	"fmt"
	"sync"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/nats-io/nats.go"
)

// RouterEventPublisher is where a NATSSink sends stamped RouterEvents and
// which answers recovery queries: natsevents.Publisher, or a zmqevents
// publisher behind an adapter.
type RouterEventPublisher interface {
	Publish(evs []kvevent.Event) error
	Serve(w kvevent.WorkerRank, rec localindex.Recovery) error
	Close() error
}

// NATSSink publishes a worker's event batches as Dynamo RouterEvents on the
// event plane (--event-plane nats, or over ZMQ through NewRouterEventSink)
// and answers recovery queries from the worker's local indexers: the agent
// logic, in process.
//
// Event ids are the local indexers' (from 0, one per event): every batch
// reaches Publish exactly once, in step order per rank, also when the fault
// injector drops it live, so counting here matches the index. A dropped
// batch is numbered and recoverable, a duplicated one is sent twice.
type NATSSink struct {
	pub    RouterEventPublisher
	worker kvevent.WorkerID
	mu     sync.Mutex
	next   []uint64 // next event id per rank
}

var _ EventSink = (*NATSSink)(nil)

// NewNATSSink returns a sink for worker id with ranks data-parallel ranks,
// publishing on conn.
func NewNATSSink(conn *nats.Conn, cfg natsevents.PublisherConfig, id uint64, ranks int) (*NATSSink, error) {
	p, err := natsevents.NewPublisher(cfg, conn)
	if err != nil {
		return nil, err
	}
	return NewRouterEventSink(p, id, ranks), nil
}

// NewRouterEventSink returns a sink for worker id with ranks data-parallel
// ranks publishing through p.
func NewRouterEventSink(p RouterEventPublisher, id uint64, ranks int) *NATSSink {
	return &NATSSink{pub: p, worker: kvevent.WorkerID(id), next: make([]uint64, ranks)}
}

// Serve answers recovery queries of every rank of w (the worker built
// with this sink) from its local indexers.
func (s *NATSSink) Serve(w *Worker) error {
	for r := range s.next {
		x := w.LocalIndex(r)
		if x == nil {
			return fmt.Errorf("worker has no rank %d", r)
		}
		if err := s.pub.Serve(kvevent.WorkerRank{ID: s.worker, Rank: kvevent.DPRank(r)}, x); err != nil {
			return err
		}
	}
	return nil
}

// Publish stamps the batch's events with the worker rank and event ids and
// publishes them (or not, or twice, as d says).
func (s *NATSSink) Publish(b Batch, d Delivery) error {
	if b.Rank < 0 || b.Rank >= len(s.next) {
		return fmt.Errorf("no rank %d", b.Rank)
	}
	wk := kvevent.WorkerRank{ID: s.worker, Rank: kvevent.DPRank(b.Rank)}
	evs := make([]kvevent.Event, len(b.Events))
	s.mu.Lock()
	for i, e := range b.Events {
		evs[i] = e.KVEvent(wk)
		evs[i].ID = s.next[b.Rank]
		s.next[b.Rank]++
	}
	s.mu.Unlock()
	switch d {
	case DropLive:
		return nil
	case Duplicate:
		if err := s.pub.Publish(evs); err != nil {
			return err
		}
	}
	return s.pub.Publish(evs)
}

// Restart does nothing: the local indexer outlives an event-stream restart
// and its ids continue (a restarted agent is a new publisher instead).
func (s *NATSSink) Restart(int) {}

// Close stops answering recovery queries.
func (s *NATSSink) Close() error {
	err := s.pub.Close()
	if errors.Is(err, nats.ErrConnectionClosed) {
		return nil
	}
	return err
}
