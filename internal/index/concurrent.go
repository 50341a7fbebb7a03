package index

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// ConcurrentConfig tunes a Concurrent index.
type ConcurrentConfig struct {
	// Index configures each shard's index (the byte budget and approximate
	// size cap apply per shard). Default DefaultConfig().
	Index Config
	// Writers is the number of writer goroutines, one shard of workers
	// each (--router-event-threads). Default 4.
	Writers int
	// QueueLen is each writer's queue length in operations; a full queue
	// blocks the caller. Default 4096.
	QueueLen int
	// OnError, when set, is called on the writer goroutine with every
	// error an operation returned (the error is counted in Stats either
	// way). It must not call back into the index.
	OnError func(kvevent.Worker, error)
}

// DefaultConcurrentConfig returns the documented defaults.
func DefaultConcurrentConfig() ConcurrentConfig {
	return ConcurrentConfig{Index: DefaultConfig(), Writers: 4, QueueLen: 4096}
}

// Validate reports the first invalid field.
func (c ConcurrentConfig) Validate() error {
	if err := c.Index.Validate(); err != nil {
		return err
	}
	if c.Writers <= 0 || c.Writers > 1024 {
		return fmt.Errorf("%w: Writers must be in 1..1024, got %d", ErrConfig, c.Writers)
	}
	if c.QueueLen <= 0 {
		return fmt.Errorf("%w: QueueLen must be positive, got %d", ErrConfig, c.QueueLen)
	}
	return nil
}

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("index closed")

type opKind uint8

const (
	opApply opKind = iota
	opRemoveWorker
	opRecord
	opPredict
	opExpire
	opBarrier
)

type op struct {
	kind  opKind
	ev    kvevent.Event
	local []uint64
	now   time.Time
	done  chan struct{}
}

type shard struct {
	mu sync.RWMutex // writers hold it for one whole operation
	x  *Index
	in chan op
}

// Concurrent is the index for the router: N writer goroutines, each owning
// a shard of the workers (a worker, all its ranks, always lands on the same
// shard, so its events apply in order), and queries that run on the
// caller's goroutine under the shards' read locks. A writer holds its
// shard's write lock for one whole operation, so a query never sees half
// an event.
type Concurrent struct {
	cfg    ConcurrentConfig
	shards []*shard
	wg     sync.WaitGroup
	life   sync.RWMutex // held shared while enqueueing; exclusively by Close
	closed bool
}

// NewConcurrent starts the writer goroutines; call Close to stop them.
func NewConcurrent(cfg ConcurrentConfig) (*Concurrent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Concurrent{cfg: cfg}
	for range cfg.Writers {
		x, err := New(cfg.Index)
		if err != nil {
			return nil, err
		}
		s := &shard{x: x, in: make(chan op, cfg.QueueLen)}
		c.shards = append(c.shards, s)
		c.wg.Add(1)
		go c.write(s)
	}
	return c, nil
}

func (c *Concurrent) write(s *shard) {
	defer c.wg.Done()
	for o := range s.in {
		if o.kind == opBarrier {
			close(o.done)
			continue
		}
		var err error
		s.mu.Lock()
		switch o.kind {
		case opApply:
			err = s.x.Apply(&o.ev)
		case opRemoveWorker:
			s.x.RemoveWorker(o.ev.Worker.ID)
		case opRecord:
			err = s.x.Record(o.ev.Worker, o.local, o.now)
		case opPredict:
			err = s.x.Predict(o.ev.Worker, o.local, o.now)
		case opExpire:
			s.x.Expire(o.now)
		}
		s.mu.Unlock()
		if err != nil && c.cfg.OnError != nil {
			c.cfg.OnError(o.ev.Worker, err)
		}
	}
}

func (c *Concurrent) shardOf(id kvevent.WorkerID) *shard {
	x := uint64(id) * 0x9e3779b97f4a7c15
	x ^= x >> 32
	return c.shards[x%uint64(len(c.shards))]
}

func (c *Concurrent) send(s *shard, o op) error {
	c.life.RLock()
	defer c.life.RUnlock()
	if c.closed {
		return ErrClosed
	}
	s.in <- o
	return nil
}

// Apply enqueues an event for its worker's writer. The index takes
// ownership of ev's slices: the caller must not modify them afterwards.
// Errors of the event itself go to OnError and Stats.
func (c *Concurrent) Apply(ev kvevent.Event) error {
	return c.send(c.shardOf(ev.Worker.ID), op{kind: opApply, ev: ev})
}

// RemoveWorker enqueues the removal of every rank of worker id.
func (c *Concurrent) RemoveWorker(id kvevent.WorkerID) error {
	return c.send(c.shardOf(id), op{kind: opRemoveWorker, ev: kvevent.Event{Worker: kvevent.Worker{ID: id}}})
}

// Record enqueues an approximate-mode recording (see Index.Record). The
// index takes ownership of local.
func (c *Concurrent) Record(w kvevent.Worker, local []uint64, now time.Time) error {
	return c.send(c.shardOf(w.ID), op{kind: opRecord, ev: kvevent.Event{Worker: w}, local: local, now: now})
}

// Predict enqueues a predict-on-route entry (see Index.Predict). The index
// takes ownership of local.
func (c *Concurrent) Predict(w kvevent.Worker, local []uint64, now time.Time) error {
	return c.send(c.shardOf(w.ID), op{kind: opPredict, ev: kvevent.Event{Worker: w}, local: local, now: now})
}

// Expire enqueues, on every writer, the expiry of approximate and
// predicted entries whose TTL ended at or before now.
func (c *Concurrent) Expire(now time.Time) error {
	for _, s := range c.shards {
		if err := c.send(s, op{kind: opExpire, now: now}); err != nil {
			return err
		}
	}
	return nil
}

// Flush waits until every operation enqueued before the call is applied.
func (c *Concurrent) Flush() error {
	dones := make([]chan struct{}, len(c.shards))
	for i, s := range c.shards {
		dones[i] = make(chan struct{})
		if err := c.send(s, op{kind: opBarrier, done: dones[i]}); err != nil {
			return err
		}
	}
	for _, d := range dones {
		<-d
	}
	return nil
}

// Query scores the request against every shard into dst (see
// Index.Query). It runs on the caller's goroutine, concurrently with
// writers and other queries.
func (c *Concurrent) Query(local []uint64, dst *Scores) {
	dst.List = dst.List[:0]
	dst.kinds = dst.kinds[:0]
	for _, s := range c.shards {
		from := len(dst.List)
		s.mu.RLock()
		s.x.queryAppend(local, dst)
		s.x.mergePredicted(dst, from)
		s.mu.RUnlock()
	}
}

// Indexed returns worker rank w's total indexed blocks.
func (c *Concurrent) Indexed(w kvevent.Worker) int {
	s := c.shardOf(w.ID)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.x.Indexed(w)
}

// Stats sums the shards' counters.
func (c *Concurrent) Stats() Stats {
	var st Stats
	for _, s := range c.shards {
		s.mu.RLock()
		st.add(s.x.Stats())
		s.mu.RUnlock()
	}
	return st
}

// Dump returns the exact index as stored events, ordered as Index.Dump
// orders them. Call Flush first to include everything enqueued.
func (c *Concurrent) Dump() []kvevent.Event {
	var out []kvevent.Event
	for _, s := range c.shards {
		s.mu.RLock()
		out = append(out, s.x.Dump()...)
		s.mu.RUnlock()
	}
	slices.SortStableFunc(out, func(a, b kvevent.Event) int {
		return cmp.Or(cmp.Compare(a.Worker.ID, b.Worker.ID), cmp.Compare(a.Worker.Rank, b.Worker.Rank))
	})
	return out
}

// Close stops the writers after they apply what is queued. Later writes
// return ErrClosed; queries keep working on the final state.
func (c *Concurrent) Close() {
	c.life.Lock()
	if !c.closed {
		c.closed = true
		for _, s := range c.shards {
			close(s.in)
		}
	}
	c.life.Unlock()
	c.wg.Wait()
}
