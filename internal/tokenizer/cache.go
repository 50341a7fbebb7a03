package tokenizer

import "sync"

// wordCache remembers the ids of recently seen words. It is split into
// shards, each a map behind its own mutex, so concurrent encoders rarely
// contend; a full shard is simply emptied (cheap, and the hot words come
// straight back). Only short words are cached: long ones are rare and would
// crowd out the rest.
type wordCache struct {
	shards [cacheShards]cacheShard
	// perShard is the most entries a shard holds before it is emptied.
	perShard int
}

const (
	cacheShards = 16
	// maxCachedWord is the longest word (bytes) the cache keeps.
	maxCachedWord = 256
)

type cacheShard struct {
	mu sync.Mutex
	m  map[string][]uint32
}

// newWordCache returns a cache of about capacity words; capacity <= 0
// disables caching (nil cache).
func newWordCache(capacity int) *wordCache {
	if capacity <= 0 {
		return nil
	}
	c := &wordCache{perShard: (capacity + cacheShards - 1) / cacheShards}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func shardOf(word string) int {
	// FNV-1a over at most the first and last 8 bytes: cheap and good enough.
	h := uint32(2166136261)
	n := len(word)
	for i := 0; i < n && i < 8; i++ {
		h = (h ^ uint32(word[i])) * 16777619
	}
	for i := max(8, n-8); i < n; i++ {
		h = (h ^ uint32(word[i])) * 16777619
	}
	h ^= uint32(n)
	return int(h % cacheShards)
}

func (c *wordCache) get(word string) ([]uint32, bool) {
	s := &c.shards[shardOf(word)]
	s.mu.Lock()
	ids, ok := s.m[word]
	s.mu.Unlock()
	return ids, ok
}

// put stores ids (which the cache then owns) for word.
func (c *wordCache) put(word string, ids []uint32) {
	s := &c.shards[shardOf(word)]
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[word] = ids
	s.mu.Unlock()
}
