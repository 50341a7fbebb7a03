package workload

import (
	"errors"
	"time"
)

// Request is one request of a workload.
type Request struct {
	// ID numbers requests in the order the source yields them, from 0.
	ID int
	// Arrival is the virtual time the request is issued, from the start of
	// the run. Closed-loop sources leave it zero: the request is issued when
	// a concurrency slot frees (see Source.Concurrency).
	Arrival time.Duration
	// Prompt holds the prompt's token ids; the slice belongs to the caller.
	Prompt []uint32
	// OutputLen is the number of tokens to generate (at least 1).
	OutputLen int
	// Output optionally holds the answer's token ids (len OutputLen) when
	// later requests of the same session include them in their prompt; an
	// engine simulator that emits these tokens keeps the next turn's prefix
	// cacheable. Nil when the workload does not care.
	Output []uint32
	// Session identifies the conversation the request belongs to, from 1;
	// 0 means the request is not part of a conversation.
	Session int
	// Turn is the request's position in its session, from 0.
	Turn int
	// Group is the shared-prefix group the request was drawn from, from 1;
	// 0 when the source has no groups. Used by tests and reports only,
	// never by routing.
	Group int
	// Tenant is who sends the request, for admission fairness ("" when
	// the workload has one sender).
	Tenant string
	// Priority is the request's priority tier (lower first), as vLLM's
	// "priority" field; 0 by default.
	Priority int
}

// Source yields a workload's requests.
//
// Contract: Next returns requests in issue order (non-decreasing Arrival for
// open-loop sources) with consecutive IDs from 0, and false once exhausted
// (and on every later call). Sources are deterministic: two sources built
// from the same configuration yield identical streams. To replay a workload
// twice (once per policy, or for the bound), build it twice.
type Source interface {
	// Next returns the next request and true, or false when exhausted.
	Next() (Request, bool)
	// Len returns the total number of requests the source yields.
	Len() int
	// Concurrency returns the most requests in flight at once; 0 means no
	// limit. A request is issued at max(Arrival, the time a slot frees), so
	// a closed-loop source (all Arrival zero) with concurrency c keeps c
	// requests in flight and issues the next as soon as one completes.
	Concurrency() int
}

// ErrConfig wraps every configuration validation failure.
var ErrConfig = errors.New("invalid workload config")

// Collect drains src into a slice, at most limit requests (limit <= 0: all).
// Meant for tests and small workloads: prompts are kept in memory.
func Collect(src Source, limit int) []Request {
	var out []Request
	for limit <= 0 || len(out) < limit {
		r, ok := src.Next()
		if !ok {
			break
		}
		out = append(out, r)
	}
	return out
}

// Slice is a Source over requests held in memory, for tests and for
// workloads built elsewhere.
type Slice struct {
	reqs        []Request
	concurrency int
	next        int
}

var _ Source = (*Slice)(nil)

// NewSlice returns a source yielding reqs in order, renumbering their IDs
// from 0, with the given concurrency (0: open loop, no limit). The slice is
// not copied.
func NewSlice(reqs []Request, concurrency int) *Slice {
	return &Slice{reqs: reqs, concurrency: max(concurrency, 0)}
}

// Next implements Source.
func (s *Slice) Next() (Request, bool) {
	if s.next >= len(s.reqs) {
		return Request{}, false
	}
	r := s.reqs[s.next]
	r.ID = s.next
	s.next++
	return r, true
}

// Len implements Source.
func (s *Slice) Len() int { return len(s.reqs) }

// Concurrency implements Source.
func (s *Slice) Concurrency() int { return s.concurrency }
