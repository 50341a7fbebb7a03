// Package kveventtest holds test support for packages that move KV events:
// a naive model of what each worker rank holds, built by applying events,
// to compare a transport's output with an engine's true cache.
package kveventtest

import (
	"maps"
	"sync"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Key names one held block: its tier and its engine hash.
type Key struct {
	// Tier is the storage tier the block is on.
	Tier kvevent.Tier
	// Hash is the engine's hash of the block.
	Hash uint64
}

// View is the naive model: per worker rank, the held blocks and their local
// hashes. It applies Stored, Removed and Cleared literally (no parents, no
// prefix rule), so it is the independent expectation a transport's events
// are checked against. The zero value is ready to use and safe for
// concurrent use.
type View struct {
	mu sync.Mutex
	m  map[kvevent.WorkerRank]map[Key]uint64
}

// ApplyEvent folds one event into the view; it never fails (the error is
// there to satisfy the consumers' applier interfaces).
func (v *View) ApplyEvent(ev kvevent.Event) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = map[kvevent.WorkerRank]map[Key]uint64{}
	}
	s := v.m[ev.Worker]
	if s == nil {
		s = map[Key]uint64{}
		v.m[ev.Worker] = s
	}
	switch ev.Kind {
	case kvevent.Stored:
		for _, b := range ev.Blocks {
			s[Key{ev.Tier, b.EngineHash}] = b.LocalHash
		}
	case kvevent.Removed:
		for _, h := range ev.Removed {
			delete(s, Key{ev.Tier, h})
		}
	case kvevent.Cleared:
		clear(s)
	}
	return nil
}

// Get returns a copy of what worker rank w holds (nil when nothing).
func (v *View) Get(w kvevent.WorkerRank) map[Key]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.m[w])
}
