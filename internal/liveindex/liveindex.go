package liveindex

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Config tunes a live Index.
type Config struct {
	// Index configures the underlying index. Default index.DefaultConfig().
	Index index.Config
	// Writers is the number of writer goroutines, each handling a fixed
	// subset of the workers (--router-event-threads). Default 4.
	Writers int
	// QueueLen is each writer's queue length in operations; a full queue
	// blocks the caller. Default 4096.
	QueueLen int
	// OnError, when set, is called on the writer goroutine with every
	// error an operation returned (the error is counted in Stats either
	// way). It must not call back into the index.
	OnError func(kvevent.WorkerRank, error)
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Index: index.DefaultConfig(), Writers: 4, QueueLen: 4096}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.Index.Validate(); err != nil {
		return err
	}
	if c.Writers <= 0 || c.Writers > 1024 {
		return fmt.Errorf("%w: Writers must be in 1..1024, got %d", index.ErrConfig, c.Writers)
	}
	if c.QueueLen <= 0 {
		return fmt.Errorf("%w: QueueLen must be positive, got %d", index.ErrConfig, c.QueueLen)
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
	opReserve
	opBarrier
)

type op struct {
	kind   opKind
	ev     kvevent.Event
	local  []uint64
	now    time.Time
	blocks int // opReserve
	done   chan struct{}
}

// writer is one writer goroutine's queue.
type writer struct {
	in    chan op
	batch []op   // the operations of one lock hold
	sink  uint32 // keeps prefetch loads alive; meaningless
}

// Index is the index for the router: one index.Index behind a read-write
// lock, N writer goroutines (a worker, all its ranks, is always handled by
// the same writer, so its events apply in order), and queries that run on
// the caller's goroutine under the read lock. A writer holds the write lock
// for at most one batch of whole operations, so a query never sees half an
// event. See doc.go for why the tree is not sharded.
type Index struct {
	cfg     Config
	mu      sync.RWMutex
	x       *index.Index
	writers []*writer
	wg      sync.WaitGroup
	life    sync.RWMutex // held shared while enqueueing; exclusively by Close
	closed  bool
}

// maxBatch bounds the block operations one writer applies per write-lock
// hold, so queries wait at most that long.
const maxBatch = 64

// New starts the writer goroutines; call Close to stop them.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x, err := index.New(cfg.Index)
	if err != nil {
		return nil, err
	}
	c := &Index{cfg: cfg, x: x}
	for range cfg.Writers {
		w := &writer{in: make(chan op, cfg.QueueLen)}
		c.writers = append(c.writers, w)
		c.wg.Add(1)
		go c.write(w)
	}
	return c, nil
}

func (c *Index) write(w *writer) {
	defer c.wg.Done()
	type failure struct {
		w   kvevent.WorkerRank
		err error
	}
	var failed []failure
	for o := range w.in {
		if o.kind == opBarrier {
			close(o.done)
			continue
		}
		// Take this operation and whatever else is already queued, up to
		// maxBatch blocks or a barrier.
		batch := append(w.batch[:0], o)
		cost := o.cost()
		for cost < maxBatch {
			var ok bool
			select {
			case o, ok = <-w.in:
			default:
			}
			if !ok {
				break
			}
			batch = append(batch, o)
			if o.kind == opBarrier {
				break
			}
			cost += o.cost()
		}
		// Load the memory the batch will touch under the read lock, next
		// to queries, so that the write lock is held for less time: most
		// of applying an event is waiting for the cache misses of its
		// worker's engine-hash table. Only when the read lock is free
		// now: waiting for it would cost the writer a second lock handoff.
		if c.mu.TryRLock() {
			for i := range batch {
				if batch[i].kind == opApply {
					w.sink += c.x.Prefetch(&batch[i].ev)
				}
			}
			c.mu.RUnlock()
		}
		var barrier chan struct{}
		c.mu.Lock()
		for i := range batch {
			o := &batch[i]
			if o.kind == opBarrier {
				barrier = o.done
				break // always last
			}
			if err := c.do(o); err != nil && c.cfg.OnError != nil {
				failed = append(failed, failure{o.ev.Worker, err})
			}
		}
		c.mu.Unlock()
		if barrier != nil {
			close(barrier)
		}
		clear(batch) // drop references to the events' slices
		w.batch = batch[:0]
		for _, f := range failed {
			c.cfg.OnError(f.w, f.err)
		}
		failed = failed[:0]
	}
}

// cost is an operation's weight in a writer batch: one plus its blocks.
func (o *op) cost() int { return 1 + len(o.ev.Blocks) + len(o.ev.Removed) + len(o.local) }

func (c *Index) do(o *op) error {
	switch o.kind {
	case opApply:
		return c.x.Apply(&o.ev)
	case opRemoveWorker:
		c.x.RemoveWorker(o.ev.Worker.ID)
	case opRecord:
		return c.x.Record(o.ev.Worker, o.local, o.now)
	case opPredict:
		return c.x.Predict(o.ev.Worker, o.local, o.now)
	case opExpire:
		c.x.Expire(o.now)
	case opReserve:
		return c.x.Reserve(o.ev.Worker, o.blocks)
	}
	return nil
}

func (c *Index) writerOf(id kvevent.WorkerID) *writer {
	x := uint64(id) * 0x9e3779b97f4a7c15
	x ^= x >> 32
	return c.writers[x%uint64(len(c.writers))]
}

func (c *Index) send(s *writer, o op) error {
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
func (c *Index) Apply(ev kvevent.Event) error {
	return c.send(c.writerOf(ev.Worker.ID), op{kind: opApply, ev: ev})
}

// RemoveWorker enqueues the removal of every rank of worker id.
func (c *Index) RemoveWorker(id kvevent.WorkerID) error {
	return c.send(c.writerOf(id), op{kind: opRemoveWorker, ev: kvevent.Event{Worker: kvevent.WorkerRank{ID: id}}})
}

// Reserve enqueues a reservation of worker rank w's engine table for
// blocks entries (see index.Index.Reserve), in order with the worker's other
// operations. An out-of-range blocks is refused here with index.ErrInvalid.
func (c *Index) Reserve(w kvevent.WorkerRank, blocks int) error {
	if blocks < 0 || blocks > index.MaxReserveBlocks {
		return fmt.Errorf("%w: reserving %d blocks for worker %v (max %d)", index.ErrInvalid, blocks, w, index.MaxReserveBlocks)
	}
	return c.send(c.writerOf(w.ID), op{kind: opReserve, ev: kvevent.Event{Worker: w}, blocks: blocks})
}

// Record enqueues an approximate-mode recording (see index.Index.Record). The
// index takes ownership of local.
func (c *Index) Record(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	return c.send(c.writerOf(w.ID), op{kind: opRecord, ev: kvevent.Event{Worker: w}, local: local, now: now})
}

// Predict enqueues a predict-on-route entry (see index.Index.Predict). The index
// takes ownership of local.
func (c *Index) Predict(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	return c.send(c.writerOf(w.ID), op{kind: opPredict, ev: kvevent.Event{Worker: w}, local: local, now: now})
}

// Expire enqueues the expiry of approximate and predicted entries whose
// TTL ended at or before now. The tree is shared, so one writer does it.
func (c *Index) Expire(now time.Time) error {
	return c.send(c.writers[0], op{kind: opExpire, now: now})
}

// Flush waits until every operation enqueued before the call is applied.
func (c *Index) Flush() error {
	dones := make([]chan struct{}, len(c.writers))
	for i, s := range c.writers {
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

// Query scores the request into dst (see index.Index.Query). It runs on the
// caller's goroutine under the read lock, concurrently with other queries.
func (c *Index) Query(local []uint64, dst *index.Scores) {
	c.mu.RLock()
	c.x.Query(local, dst)
	c.mu.RUnlock()
}

// Indexed returns worker rank w's total indexed blocks.
func (c *Index) Indexed(w kvevent.WorkerRank) int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.x.Indexed(w)
}

// Stats returns the index's counters.
func (c *Index) Stats() index.Stats {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.x.Stats()
}

// Dump returns the exact index as stored events (see index.Index.Dump). Call
// Flush first to include everything enqueued.
func (c *Index) Dump() []kvevent.Event {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.x.Dump()
}

// Close stops the writers after they apply what is queued. Later writes
// return ErrClosed; queries keep working on the final state.
func (c *Index) Close() {
	c.life.Lock()
	if !c.closed {
		c.closed = true
		for _, s := range c.writers {
			close(s.in)
		}
	}
	c.life.Unlock()
	c.wg.Wait()
}
