package tokenizer

import (
	"hash/maphash"
	"sync/atomic"
	"unsafe"
)

// wordCache remembers the ids of recently seen words. It is a two-way
// set-associative table of atomic pointers to immutable entries: a lookup is
// one hash, at most two atomic loads and string comparisons, with no lock,
// so concurrent encoders never wait for each other; a new word takes a free
// slot of its pair or replaces one of the two words there (hot words come
// straight back). Only short words are
// cached: long ones are rare and would crowd out the rest.
//
// Each entry is two heap objects (the entry and one array holding its ids
// and its word's bytes), which keeps a full cache's cost to the garbage
// collector at a fraction of what a map of strings to slices had.
type wordCache struct {
	slots []atomic.Pointer[cacheEntry]
	mask  uint64
	seed  maphash.Seed
}

// maxCachedWord is the longest word (bytes) the cache keeps.
const maxCachedWord = 256

// cacheEntry is one cached word and its ids; never modified once stored.
type cacheEntry struct {
	word string
	ids  []uint32
}

// newWordCache returns a cache of about capacity words (its table has the
// next power of two at or above capacity slots); capacity <= 0 disables
// caching (nil cache).
func newWordCache(capacity int) *wordCache {
	if capacity <= 0 {
		return nil
	}
	size := 2
	for size < capacity {
		size <<= 1
	}
	return &wordCache{slots: make([]atomic.Pointer[cacheEntry], size), mask: uint64(size - 1), seed: maphash.MakeSeed()}
}

// pair returns the two slots word may occupy, and its hash.
func (c *wordCache) pair(word string) (*atomic.Pointer[cacheEntry], *atomic.Pointer[cacheEntry], uint64) {
	h := maphash.String(c.seed, word)
	i := h & c.mask &^ 1
	return &c.slots[i], &c.slots[i+1], h
}

// get returns word's ids; the slice must not be modified.
func (c *wordCache) get(word string) ([]uint32, bool) {
	s0, s1, _ := c.pair(word)
	if e := s0.Load(); e != nil && e.word == word {
		return e.ids, true
	}
	if e := s1.Load(); e != nil && e.word == word {
		return e.ids, true
	}
	return nil, false
}

// put stores copies of word and ids.
func (c *wordCache) put(word string, ids []uint32) {
	// One array: the ids, then the word's bytes packed after them.
	buf := make([]uint32, len(ids)+(len(word)+3)/4)
	copy(buf, ids)
	tail := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf[len(ids):]))), len(word))
	copy(tail, word)
	e := &cacheEntry{ids: buf[:len(ids):len(ids)]}
	if len(word) > 0 {
		e.word = unsafe.String(&tail[0], len(word))
	}
	s0, s1, h := c.pair(word)
	switch {
	case s0.Load() == nil:
		s0.Store(e)
	case s1.Load() == nil:
		s1.Store(e)
	case h>>63 == 0: // both taken: evict one, chosen by a hash bit
		s0.Store(e)
	default:
		s1.Store(e)
	}
}

// len counts the cached words (for tests).
func (c *wordCache) len() int {
	n := 0
	for i := range c.slots {
		if c.slots[i].Load() != nil {
			n++
		}
	}
	return n
}
