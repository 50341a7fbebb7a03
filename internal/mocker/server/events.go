package server

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
)

// Batch is one engine step's KV events of one rank, as vLLM publishes them
// after a scheduler step.
type Batch struct {
	// Rank is the data-parallel rank that produced the events.
	Rank int
	// TS is the wall-clock time the step ended.
	TS time.Time
	// Events are the step's events; the batch owns them.
	Events []mocker.Event
}

// Delivery says how a sink should deliver one batch (fault injection).
type Delivery uint8

// Deliveries.
const (
	// Deliver sends the batch normally.
	Deliver Delivery = iota
	// DropLive numbers and buffers the batch for replay but does not send
	// it live: consumers see a gap they can repair.
	DropLive
	// Duplicate sends the batch twice.
	Duplicate
)

// EventSink receives event batches. Publish is called in step order per
// rank (from the rank's goroutine, or from the fault injector's delay
// goroutine), once per step with events; it must not block for long and
// may keep the batch. Restart asks the sink to restart the rank's sequence
// as a restarted engine would. Close releases the sink's resources.
type EventSink interface {
	Publish(b Batch, d Delivery) error
	Restart(rank int)
	Close() error
}

// faultSink applies Faults in front of the real sinks.
type faultSink struct {
	f      Faults
	sinks  []EventSink
	mu     sync.Mutex
	rng    *rand.Rand
	counts map[int]int
	// delayed delivery: one goroutine keeps order
	queue chan delayed
	wg    sync.WaitGroup
}

type delayed struct {
	b   Batch
	d   Delivery
	due time.Time
}

func newFaultSink(ctx context.Context, f Faults, sinks []EventSink) *faultSink {
	s := &faultSink{f: f, sinks: sinks, rng: rand.New(rand.NewPCG(f.Seed, f.Seed^0x5eed)), counts: map[int]int{}}
	if f.DelayEvents > 0 {
		s.queue = make(chan delayed, 4096)
		s.wg.Add(1)
		go s.delayLoop(ctx)
	}
	return s
}

func (s *faultSink) delayLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case d, ok := <-s.queue:
			if !ok {
				return
			}
			t.Reset(time.Until(d.due))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s.send(d.b, d.d)
		}
	}
}

func (s *faultSink) send(b Batch, d Delivery) {
	for _, k := range s.sinks {
		_ = k.Publish(b, d)
	}
}

// publish runs one batch through the dice: restart, drop, duplicate, delay.
func (s *faultSink) publish(b Batch) {
	if len(s.sinks) == 0 {
		return
	}
	s.mu.Lock()
	s.counts[b.Rank]++
	restart := s.f.RestartEventsEvery > 0 && s.counts[b.Rank]%s.f.RestartEventsEvery == 0
	deliver := !(s.f.DropEvents > 0 && s.rng.Float64() < s.f.DropEvents)
	dup := s.f.DuplicateEvents > 0 && s.rng.Float64() < s.f.DuplicateEvents
	s.mu.Unlock()
	if restart {
		for _, k := range s.sinks {
			k.Restart(b.Rank)
		}
	}
	d := Deliver
	switch {
	case !deliver:
		d = DropLive
	case dup:
		d = Duplicate
	}
	if s.queue != nil {
		s.queue <- delayed{b, d, time.Now().Add(s.f.DelayEvents)}
	} else {
		s.send(b, d)
	}
}

// wait returns once the delay goroutine (if any) has ended; call it after
// cancelling the context given to newFaultSink.
func (s *faultSink) wait() { s.wg.Wait() }
