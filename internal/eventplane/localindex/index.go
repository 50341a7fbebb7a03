package localindex

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Capacity is the default number of events the ring buffer keeps.
const Capacity = 1024

// Errors of Range. Callers answer ErrGone with a Dump.
var (
	// ErrTooNew means the range starts after the last event id: the asker
	// is ahead of this worker (it restarted, or the ids were reset).
	ErrTooNew = errors.New("localindex: range starts after the last event")
	// ErrInvalidRange means from is greater than to.
	ErrInvalidRange = errors.New("localindex: invalid event range")
	// ErrGone means part of the range has left the ring buffer; ask for a
	// dump instead.
	ErrGone = errors.New("localindex: range no longer buffered")
)

// Recovery is the contract the event plane serves to routers: the newest
// event id, a range of buffered events, or a dump that rebuilds the worker's
// cache. Index implements it.
type Recovery interface {
	// LastEventID returns the id of the newest applied event and whether
	// there is one (ids count from 0, so 0 is a real event id).
	LastEventID() (id uint64, ok bool)
	// EventsRange returns the events with ids from..to inclusive, in order,
	// or ErrInvalidRange, ErrTooNew, or ErrGone. A to beyond the last id is
	// cut to it.
	EventsRange(from, to uint64) ([]kvevent.Event, error)
	// Dump returns stored events (parents before children) that rebuild the
	// cached blocks, and the id of the last event they include (0 and no
	// events when none was applied yet; LastEventID tells the two apart).
	Dump() (lastID uint64, events []kvevent.Event)
}

var _ Recovery = (*Index)(nil)

type block struct {
	local     uint64
	parent    uint64
	hasParent bool
}

// Index is one worker rank's local indexer.
type Index struct {
	mu     sync.Mutex
	worker kvevent.WorkerRank
	blocks [kvevent.NumTiers]map[uint64]block
	ring   []kvevent.Event
	start  int    // ring index of the oldest event
	next   uint64 // id of the next event; the last is next-1 when next > 0
	cap    int
}

// New returns an empty index for a worker rank keeping capacity events
// (Capacity when capacity <= 0).
func New(w kvevent.WorkerRank, capacity int) *Index {
	if capacity <= 0 {
		capacity = Capacity
	}
	x := &Index{worker: w, cap: capacity}
	for i := range x.blocks {
		x.blocks[i] = make(map[uint64]block)
	}
	return x
}

// Apply records events in order, stamping each with the worker, the next
// event id, and returns them (the same slice, stamped) for publishing.
// Events the index cannot make sense of (removal of an unknown block, a
// store below an unknown parent) are still numbered and buffered, so ids
// have no holes; they simply change nothing.
func (x *Index) Apply(evs []kvevent.Event) []kvevent.Event {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range evs {
		evs[i].Worker = x.worker
		evs[i].ID = x.next
		x.next++
		x.apply(evs[i])
		x.push(cloneEvent(evs[i]))
	}
	return evs
}

func (x *Index) apply(ev kvevent.Event) {
	if ev.Tier >= kvevent.NumTiers {
		return
	}
	m := x.blocks[ev.Tier]
	switch ev.Kind {
	case kvevent.Stored:
		parent, has := ev.Parent, ev.HasParent
		for _, b := range ev.Blocks {
			m[b.EngineHash] = block{local: b.LocalHash, parent: parent, hasParent: has}
			parent, has = b.EngineHash, true
		}
	case kvevent.Removed:
		for _, h := range ev.Removed {
			delete(m, h)
		}
	case kvevent.Cleared:
		for _, t := range x.blocks {
			clear(t)
		}
	}
}

func (x *Index) push(ev kvevent.Event) {
	if len(x.ring) < x.cap {
		x.ring = append(x.ring, ev)
		return
	}
	x.ring[x.start] = ev
	x.start = (x.start + 1) % x.cap
}

// LastEventID returns the id of the newest applied event and whether one
// was applied (the first event's id is 0).
func (x *Index) LastEventID() (uint64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.last(), x.next > 0
}

// last is the newest event's id (0 when there is none: see next).
func (x *Index) last() uint64 { return max(x.next, 1) - 1 }

// EventsRange returns buffered events from..to (see Recovery).
func (x *Index) EventsRange(from, to uint64) ([]kvevent.Event, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if from > to {
		return nil, fmt.Errorf("%w: [%d, %d]", ErrInvalidRange, from, to)
	}
	if from >= x.next {
		return nil, fmt.Errorf("%w: from %d, next %d", ErrTooNew, from, x.next)
	}
	oldest := x.next - uint64(len(x.ring))
	if from < oldest {
		return nil, fmt.Errorf("%w: from %d, oldest buffered %d", ErrGone, from, oldest)
	}
	to = min(to, x.next-1)
	out := make([]kvevent.Event, 0, to-from+1)
	for id := from; id <= to; id++ {
		out = append(out, cloneEvent(x.ring[(x.start+int(id-oldest))%len(x.ring)]))
	}
	return out, nil
}

// Dump returns one stored event per block, parents first, per tier.
func (x *Index) Dump() (uint64, []kvevent.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []kvevent.Event
	last := x.last()
	for tier, m := range x.blocks {
		done := make(map[uint64]bool, len(m))
		keys := make([]uint64, 0, len(m))
		for h := range m {
			keys = append(keys, h)
		}
		slices.Sort(keys) // deterministic dumps
		var emit func(h uint64)
		emit = func(h uint64) {
			b := m[h]
			done[h] = true
			if b.hasParent {
				if _, ok := m[b.parent]; ok && !done[b.parent] {
					emit(b.parent)
				}
			}
			out = append(out, kvevent.Event{Worker: x.worker, Tier: kvevent.Tier(tier), ID: last,
				Kind: kvevent.Stored, HasParent: b.hasParent, Parent: b.parent,
				Blocks: []kvevent.Block{{EngineHash: h, LocalHash: b.local}}})
		}
		for _, h := range keys {
			if !done[h] {
				emit(h)
			}
		}
	}
	return last, out
}

// Len returns the number of blocks held on a tier.
func (x *Index) Len(t kvevent.Tier) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t >= kvevent.NumTiers {
		return 0
	}
	return len(x.blocks[t])
}

// Reset forgets everything and restarts event ids at 0 (a restarted
// worker).
func (x *Index) Reset() {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, t := range x.blocks {
		clear(t)
	}
	x.ring, x.start, x.next = x.ring[:0], 0, 0
}

func cloneEvent(ev kvevent.Event) kvevent.Event {
	ev.Blocks = slices.Clone(ev.Blocks)
	ev.Removed = slices.Clone(ev.Removed)
	return ev
}
