package chaos

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
)

// eventFaults are the event-plane faults a schedule switches at run time.
type eventFaults struct {
	// drop and dup are per-batch probabilities of a live drop (the batch
	// stays in the replay buffer: a gap the router must repair) and of a
	// duplicate delivery.
	drop, dup float64
	// delay holds every batch this long (order kept).
	delay time.Duration
}

// faultySink sits between a mock worker and its ZMQ publisher: the
// worker's local indexer (the engine's truth) is fed before it, so what
// it does to the batches is exactly what the router must survive.
type faultySink struct {
	inner server.EventSink

	mu      sync.Mutex
	f       eventFaults
	rng     *rand.Rand
	restart bool // restart the sequence at the next Cleared batch
	stats   *counters

	q    chan queued
	done chan struct{}
}

type queued struct {
	b   server.Batch
	d   server.Delivery
	due time.Time
}

var _ server.EventSink = (*faultySink)(nil)

func newFaultySink(inner server.EventSink, seed uint64, stats *counters) *faultySink {
	s := &faultySink{inner: inner, rng: rand.New(rand.NewPCG(seed, 0xc4a05)), stats: stats,
		q: make(chan queued, 1<<16), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *faultySink) set(f eventFaults) {
	s.mu.Lock()
	s.f = f
	s.mu.Unlock()
}

// restartAtClear makes the next batch holding an AllBlocksCleared (the
// answer to /reset_prefix_cache) start a new sequence at 0: what the
// router sees when an engine process restarts.
func (s *faultySink) restartAtClear(on bool) {
	s.mu.Lock()
	s.restart = on
	s.mu.Unlock()
}

func (s *faultySink) Publish(b server.Batch, _ server.Delivery) error {
	s.mu.Lock()
	d := server.Deliver
	switch {
	case s.f.drop > 0 && s.rng.Float64() < s.f.drop:
		d = server.DropLive
		s.stats.add("event batches dropped live", 1)
	case s.f.dup > 0 && s.rng.Float64() < s.f.dup:
		d = server.Duplicate
		s.stats.add("event batches duplicated", 1)
	}
	restart := false
	if s.restart {
		for _, e := range b.Events {
			if e.Kind == kvevent.Cleared {
				restart, s.restart = true, false
			}
		}
	}
	due := time.Now().Add(s.f.delay)
	if s.f.delay > 0 {
		s.stats.add("event batches delayed", 1)
	}
	s.mu.Unlock()
	if restart {
		// The restart must not overtake batches still queued.
		s.q <- queued{d: 255}
	}
	s.q <- queued{b: b, d: d, due: due}
	return nil
}

func (s *faultySink) loop() {
	defer close(s.done)
	for x := range s.q {
		if x.d == 255 {
			s.inner.Restart(x.b.Rank)
			continue
		}
		if w := time.Until(x.due); w > 0 {
			time.Sleep(w)
		}
		_ = s.inner.Publish(x.b, x.d)
	}
}

func (s *faultySink) Restart(rank int) { s.q <- queued{b: server.Batch{Rank: rank}, d: 255} }

// Close drains the queue, then closes the publisher.
func (s *faultySink) Close() error {
	close(s.q)
	<-s.done
	return s.inner.Close()
}

// counters counts what a run did, by name (faults injected, outcomes).
type counters struct {
	mu sync.Mutex
	m  map[string]int
}

func newCounters() *counters { return &counters{m: map[string]int{}} }

func (c *counters) add(k string, n int) {
	c.mu.Lock()
	c.m[k] += n
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}
