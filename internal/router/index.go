package router

import (
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
)

// Index is what the router needs from the prefix index.
//
// Apply and RemoveWorker change exact state; Record (approximate mode) and
// Predict (predict-on-route) note the router's own decisions; all of them
// take ownership of the slices they are given and may apply asynchronously.
// Expire drops recorded and predicted entries whose TTL ended at or before
// now. Query fills dst with every worker rank's leading overlap, per tier,
// for the request's local block hashes; it must be safe to call
// concurrently with itself and with the writers. Reserve sizes a worker
// rank's engine table for its KV capacity ahead of its events; it changes
// no answer, only speed and memory.
type Index interface {
	Apply(ev kvevent.Event) error
	RemoveWorker(id kvevent.WorkerID) error
	Reserve(w kvevent.WorkerRank, blocks int) error
	Record(w kvevent.WorkerRank, local []uint64, now time.Time) error
	Predict(w kvevent.WorkerRank, local []uint64, now time.Time) error
	Expire(now time.Time) error
	Query(local []uint64, dst *index.Scores)
}

var (
	_ Index = (*liveindex.Index)(nil)
	_ Index = (*Serial)(nil)
)

// Serial makes a single-threaded *index.Index usable as an Index by
// guarding it with a mutex; every write applies before it returns. The
// offline simulator and deterministic tests use it.
type Serial struct {
	mu sync.RWMutex
	x  *index.Index
}

// NewSerial wraps x; x must not be used directly afterwards.
func NewSerial(x *index.Index) *Serial { return &Serial{x: x} }

// Apply implements Index.
func (s *Serial) Apply(ev kvevent.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.Apply(&ev)
}

// RemoveWorker implements Index.
func (s *Serial) RemoveWorker(id kvevent.WorkerID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.x.RemoveWorker(id)
	return nil
}

// Reserve implements Index.
func (s *Serial) Reserve(w kvevent.WorkerRank, blocks int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.Reserve(w, blocks)
}

// Record implements Index.
func (s *Serial) Record(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.Record(w, local, now)
}

// Predict implements Index.
func (s *Serial) Predict(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.x.Predict(w, local, now)
}

// Expire implements Index.
func (s *Serial) Expire(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.x.Expire(now)
	return nil
}

// Query implements Index. Queries share a read lock (the index's query
// only touches atomics when a byte budget is set).
func (s *Serial) Query(local []uint64, dst *index.Scores) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.x.Query(local, dst)
}
