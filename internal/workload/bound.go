package workload

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// LRUPool is one shared, deduplicated pool of KV blocks with LRU eviction,
// keyed by block sequence hash (equal key = equal block and prefix). It is
// the model behind the bound: the union of the fleet's caches can do no
// better than one pool of their total size managed well, and LRU is what the
// engines do.
type LRUPool struct {
	capacity int
	index    map[uint64]int32
	nodes    []lruNode // nodes[0] is the list sentinel
	scratch  []int32
}

type lruNode struct {
	key        uint64
	prev, next int32
}

// NewLRUPool returns an empty pool of capacity blocks; capacity <= 0 means
// unbounded (the infinite-cache bound).
func NewLRUPool(capacity int) *LRUPool {
	hint := 0
	if capacity > 0 {
		hint = min(capacity, 1<<24)
	}
	return &LRUPool{capacity: capacity, index: make(map[uint64]int32, hint), nodes: make([]lruNode, 1, hint+1)}
}

// Len returns the number of blocks held.
func (p *LRUPool) Len() int { return len(p.index) }

// Serve processes one request whose full blocks have the given sequence
// hashes and returns how many leading blocks were already held (the prefix
// hit). Afterwards every block of the request is held, ordered as vLLM
// leaves them when the request is freed: the hit blocks are pinned while the
// missing ones are inserted (so a request never evicts its own prefix unless
// it alone exceeds the pool), and the request's blocks end up most recently
// used with its first block last to be evicted.
func (p *LRUPool) Serve(blocks []uint64) int {
	hits := p.scratch[:0]
	for _, b := range blocks {
		n, ok := p.index[b]
		if !ok {
			break
		}
		hits = append(hits, n)
	}
	p.scratch = hits
	hit := len(hits)
	for i := hit - 1; i >= 0; i-- {
		p.toBack(hits[i])
	}
	for i := len(blocks) - 1; i >= hit; i-- {
		p.touch(blocks[i])
	}
	if p.capacity > 0 && len(blocks) > p.capacity {
		// The misses may have evicted some hits: look them up again.
		for i := hit - 1; i >= 0; i-- {
			p.touch(blocks[i])
		}
		return hit
	}
	for i := hit - 1; i >= 0; i-- {
		p.toBack(hits[i])
	}
	return hit
}

// toBack makes node n the most recently used.
func (p *LRUPool) toBack(n int32) {
	p.unlink(n)
	p.link(n)
}

// link puts node n at the most recent end (just before the sentinel).
func (p *LRUPool) link(n int32) {
	last := p.nodes[0].prev
	p.nodes[n].prev, p.nodes[n].next = last, 0
	p.nodes[last].next = n
	p.nodes[0].prev = n
}

// touch makes key the most recently used block, inserting it (and evicting
// the least recently used block when full) if absent.
func (p *LRUPool) touch(key uint64) {
	if n, ok := p.index[key]; ok {
		p.toBack(n)
		return
	}
	var n int32
	if p.capacity > 0 && len(p.index) >= p.capacity {
		n = p.nodes[0].next // reuse the evicted node
		p.unlink(n)
		delete(p.index, p.nodes[n].key)
	} else {
		p.nodes = append(p.nodes, lruNode{})
		n = int32(len(p.nodes) - 1)
	}
	p.nodes[n].key = key
	p.index[key] = n
	p.link(n)
}

func (p *LRUPool) unlink(n int32) {
	prev, next := p.nodes[n].prev, p.nodes[n].next
	p.nodes[prev].next = next
	p.nodes[next].prev = prev
}

// Bound is the result of replaying a workload through one shared LRU pool.
type Bound struct {
	// Requests is the number of requests replayed.
	Requests int
	// PromptTokens is the sum of prompt lengths.
	PromptTokens int64
	// HitTokens is the sum of prefix-hit blocks times the block size.
	HitTokens int64
	// Blocks is the sum of full blocks per prompt.
	Blocks int64
	// HitBlocks is the sum of prefix-hit blocks.
	HitBlocks int64
}

// HitRatio returns HitTokens / PromptTokens (tokens served from cache over
// prompt tokens, the same definition as the simulator's hit ratio), or 0
// for an empty workload.
func (b Bound) HitRatio() float64 {
	if b.PromptTokens == 0 {
		return 0
	}
	return float64(b.HitTokens) / float64(b.PromptTokens)
}

// BlockHitRatio returns HitBlocks / Blocks, or 0 when there are no blocks.
func (b Bound) BlockHitRatio() float64 {
	if b.Blocks == 0 {
		return 0
	}
	return float64(b.HitBlocks) / float64(b.Blocks)
}

// ComputeBound replays src, in issue order, through one LRU pool of
// capacityBlocks blocks of blockSize tokens (the fleet's total: workers ×
// blocks per worker; <= 0 for an unbounded pool). Only full blocks are
// cached, as in the engines; blocks enter the pool at the request's issue
// with no timing, so real systems, which cache a prefix only once its first
// prefill is done, can only do worse. It drains src.
func ComputeBound(src Source, blockSize, capacityBlocks int) (Bound, error) {
	if blockSize <= 0 {
		return Bound{}, fmt.Errorf("computing bound: %w", kvhash.ErrBlockSize)
	}
	pool := NewLRUPool(capacityBlocks)
	opts := kvhash.Options{BlockSize: blockSize}
	var b Bound
	var local, seq []uint64
	for {
		r, ok := src.Next()
		if !ok {
			return b, nil
		}
		var err error
		local, seq, err = kvhash.Hashes(r.Prompt, opts, local, seq)
		if err != nil {
			return b, fmt.Errorf("computing bound: %w", err)
		}
		hit := pool.Serve(seq)
		b.Requests++
		b.PromptTokens += int64(len(r.Prompt))
		b.Blocks += int64(len(seq))
		b.HitBlocks += int64(hit)
		b.HitTokens += int64(hit) * int64(blockSize)
	}
}
