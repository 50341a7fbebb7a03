package indexbench

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/trace"
)

// Config sizes the workload.
type Config struct {
	// BlockSize is the engine KV block size in tokens. Default 64.
	BlockSize int
	// Workers is the number of simulated workers. Default 64.
	Workers int
	// WorkerBlocks is each worker's KV cache capacity in blocks. Default 16384.
	WorkerBlocks int
	// MaxRequests caps the trace rows used; 0 means all.
	MaxRequests int
	// Passes replays the trace this many times; each pass after the first
	// renames its hash ids (so its blocks are new, shared within the pass
	// as in the trace), which fills the caches of a large fleet. Default 1
	// (0 also means 1).
	Passes int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{BlockSize: 64, Workers: 64, WorkerBlocks: 16384, Passes: 1}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("block size must be positive, got %d", c.BlockSize)
	case c.Workers <= 0:
		return fmt.Errorf("workers must be positive, got %d", c.Workers)
	case c.WorkerBlocks <= 0:
		return fmt.Errorf("worker blocks must be positive, got %d", c.WorkerBlocks)
	case c.MaxRequests < 0:
		return fmt.Errorf("max requests must not be negative, got %d", c.MaxRequests)
	case c.Passes < 0 || c.Passes > MaxPasses:
		return fmt.Errorf("passes must be in [0, %d], got %d", MaxPasses, c.Passes)
	}
	return nil
}

// Stream is a replayable workload: events in emission order and, per
// request, the local hashes a router would query with.
type Stream struct {
	// Events are the workers' KV events in order.
	Events []kvevent.Event
	// Steps interleaves the two: Steps[i] < 0 means query -Steps[i]-1,
	// otherwise apply Events[Steps[i]].
	Steps []int
	// Queries are the requests' local block hashes.
	Queries [][]uint64
	// BlockOps is the number of stored plus removed blocks in Events.
	BlockOps int
	// Workers is the number of workers that received requests.
	Workers int
	// Ranks are those workers, in order of their first request.
	Ranks []kvevent.WorkerRank
	// WorkerBlocks is each worker's KV cache capacity in blocks (what a
	// router passes to index.Reserve when the worker joins).
	WorkerBlocks int
}

// MaxPasses bounds Config.Passes.
const MaxPasses = 64

// ErrEmpty is returned when the trace yields no full block.
var ErrEmpty = errors.New("trace has no full block at this block size")

// Build replays the trace: request i goes to the worker picked by a hash of
// its first two Mooncake block ids (session affinity, a simple prefix-aware
// policy), which admits the request's blocks into its LRU cache.
func Build(reqs []trace.Request, cfg Config) (*Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxRequests > 0 && len(reqs) > cfg.MaxRequests {
		reqs = reqs[:cfg.MaxRequests]
	}
	s := &Stream{WorkerBlocks: cfg.WorkerBlocks}
	ws := make([]*lru, cfg.Workers)
	var tokens []uint32
	var local, seq []uint64
	used := map[int]bool{}
	rows := reqs
	for p := 1; p < cfg.Passes; p++ {
		for _, q := range reqs {
			r := q
			r.HashIDs = make([]uint64, len(q.HashIDs))
			for k, h := range q.HashIDs {
				r.HashIDs[k] = h ^ uint64(p)<<48
			}
			rows = append(rows, r)
		}
	}
	for i, q := range rows {
		tokens = q.Tokens(tokens, uint64(i))
		var err error
		local, seq, err = kvhash.Hashes(tokens, kvhash.Options{BlockSize: cfg.BlockSize}, local, seq)
		if err != nil {
			return nil, fmt.Errorf("hashing request %d: %w", i, err)
		}
		if len(local) == 0 {
			continue
		}
		w := pick(q, i, cfg.Workers)
		used[w] = true
		if ws[w] == nil {
			ws[w] = newLRU(kvevent.WorkerRank{ID: kvevent.WorkerID(w + 1)}, cfg.WorkerBlocks)
			s.Ranks = append(s.Ranks, ws[w].w)
		}
		s.Steps = append(s.Steps, -len(s.Queries)-1)
		s.Queries = append(s.Queries, append([]uint64(nil), local...))
		for _, ev := range ws[w].admit(local, seq) {
			s.Steps = append(s.Steps, len(s.Events))
			s.Events = append(s.Events, ev)
			s.BlockOps += len(ev.Blocks) + len(ev.Removed)
		}
	}
	if len(s.Queries) == 0 {
		return nil, ErrEmpty
	}
	s.Workers = len(used)
	return s, nil
}

func pick(q trace.Request, i, workers int) int {
	x := uint64(i) // no hash ids: spread by position
	if len(q.HashIDs) > 0 {
		x = q.HashIDs[0]*0x9e3779b97f4a7c15 + 1
		if len(q.HashIDs) > 1 {
			x ^= q.HashIDs[1] * 0xbf58476d1ce4e5b9
		}
	}
	x ^= x >> 31
	x *= 0x94d049bb133111eb
	x ^= x >> 29
	return int(x % uint64(workers))
}

// lru is one simulated worker's prefix cache, keyed by sequence hash.
type lru struct {
	w          kvevent.WorkerRank
	cap        int
	m          map[uint64]*entry
	head, tail *entry // head = most recent
}

type entry struct {
	hash       uint64
	prev, next *entry
}

func newLRU(w kvevent.WorkerRank, capacity int) *lru {
	return &lru{w: w, cap: capacity, m: map[uint64]*entry{}}
}

func (l *lru) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (l *lru) pushFront(e *entry) {
	e.next = l.head
	if l.head != nil {
		l.head.prev = e
	}
	l.head = e
	if l.tail == nil {
		l.tail = e
	}
}

// admit serves a request: the held prefix is reused, the rest stored (one
// stored event), blocks are touched tail first so that a chain is evicted
// from its end, and the cache is trimmed to capacity (one removed event).
func (l *lru) admit(local, seq []uint64) []kvevent.Event {
	var out []kvevent.Event
	miss := 0
	for miss < len(seq) && l.m[seq[miss]] != nil {
		miss++
	}
	// Blocks held beyond the first miss lost their prefix: drop them so
	// the store below is a clean chain (vLLM would recompute them).
	var orphans []uint64
	for j := miss; j < len(seq); j++ {
		if e := l.m[seq[j]]; e != nil {
			l.unlink(e)
			delete(l.m, seq[j])
			orphans = append(orphans, seq[j])
		}
	}
	if len(orphans) > 0 {
		out = append(out, kvevent.Event{Worker: l.w, Kind: kvevent.Removed, Removed: orphans})
	}
	if miss < len(seq) {
		ev := kvevent.Event{Worker: l.w, Kind: kvevent.Stored, HasParent: miss > 0}
		if miss > 0 {
			ev.Parent = seq[miss-1]
		}
		ev.Blocks = make([]kvevent.Block, 0, len(seq)-miss)
		for j := miss; j < len(seq); j++ {
			ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: seq[j], LocalHash: local[j]})
			e := &entry{hash: seq[j]}
			l.m[seq[j]] = e
			l.pushFront(e)
		}
		out = append(out, ev)
	}
	for j := len(seq) - 1; j >= 0; j-- {
		if e := l.m[seq[j]]; e != nil {
			l.unlink(e)
			l.pushFront(e)
		}
	}
	var removed []uint64
	for len(l.m) > l.cap {
		e := l.tail
		l.unlink(e)
		delete(l.m, e.hash)
		removed = append(removed, e.hash)
	}
	if len(removed) > 0 {
		out = append(out, kvevent.Event{Worker: l.w, Kind: kvevent.Removed, Removed: removed})
	}
	return out
}
