package mocker

import "github.com/kvrouter/kvrouter/internal/kvevent"

// none marks an absent block index in the LRU links.
const none int32 = -1

// gpuPool is a rank's paged device KV cache: fixed blocks, each either in
// use (refcount > 0), free and cached (in the LRU list, its hash still
// findable), or free and empty (on the empty stack). New blocks come from
// the empty stack first; only when it is empty is the least recently freed
// cached block evicted. Every full block a running request holds is cached
// (see Engine.fillBlocks), so free cached blocks are exactly the evictable
// prefix cache.
type gpuPool struct {
	ref      []int32
	seq      []uint64 // router sequence hash of a cached block
	parent   []uint64 // router sequence hash of its parent block
	hasPar   []bool
	cached   []bool
	prev     []int32
	next     []int32
	head     int32 // least recently freed cached block
	tail     int32
	lruLen   int
	empty    []int32
	byHash   map[uint64]int32
	tokens   []uint32    // per block token ids, kept only when the CPU tier is on
	salt     []blockSalt // per block LoRA adapter and cache salt
	bs       int
	emit     *eventLog
	cpu      *cpuPool // nil when the tier is off
	hashSeed uint64
}

func newGPUPool(n, bs int, keepTokens bool, emit *eventLog, cpu *cpuPool, hashSeed uint64) *gpuPool {
	p := &gpuPool{
		ref:      make([]int32, n),
		seq:      make([]uint64, n),
		parent:   make([]uint64, n),
		hasPar:   make([]bool, n),
		salt:     make([]blockSalt, n),
		cached:   make([]bool, n),
		prev:     make([]int32, n),
		next:     make([]int32, n),
		head:     none,
		tail:     none,
		empty:    make([]int32, n),
		byHash:   make(map[uint64]int32),
		bs:       bs,
		emit:     emit,
		cpu:      cpu,
		hashSeed: hashSeed,
	}
	for i := range n {
		// Pop from the end: block 0 is handed out first.
		p.empty[i] = int32(n - 1 - i)
	}
	if keepTokens {
		p.tokens = make([]uint32, n*bs)
	}
	return p
}

func (p *gpuPool) total() int { return len(p.ref) }

// free is the number of blocks not in use (empty plus evictable cached).
func (p *gpuPool) free() int { return len(p.empty) + p.lruLen }

func (p *gpuPool) lruRemove(b int32) {
	if p.prev[b] != none {
		p.next[p.prev[b]] = p.next[b]
	} else {
		p.head = p.next[b]
	}
	if p.next[b] != none {
		p.prev[p.next[b]] = p.prev[b]
	} else {
		p.tail = p.prev[b]
	}
	p.lruLen--
}

func (p *gpuPool) lruPush(b int32) {
	p.prev[b], p.next[b] = p.tail, none
	if p.tail != none {
		p.next[p.tail] = b
	} else {
		p.head = b
	}
	p.tail = b
	p.lruLen++
}

// touch takes a reference on a cached block found by hash, pulling it out
// of the LRU list if it was free.
func (p *gpuPool) touch(b int32) {
	if p.ref[b] == 0 {
		p.lruRemove(b)
	}
	p.ref[b]++
}

// allocate hands out a block with refcount 1, evicting the least recently
// freed cached block when no empty block is left. The caller has checked
// that a block is free.
func (p *gpuPool) allocate() int32 {
	var b int32
	if n := len(p.empty); n > 0 {
		b = p.empty[n-1]
		p.empty = p.empty[:n-1]
	} else {
		b = p.head
		p.lruRemove(b)
		p.evict(b)
	}
	p.ref[b] = 1
	return b
}

// evict forgets a cached block's hash: a removed event for the device, and
// the block moves to the CPU tier when there is one.
func (p *gpuPool) evict(b int32) {
	h := p.seq[b]
	delete(p.byHash, h)
	p.cached[b] = false
	// Copy to the host tier before the device copy goes, as an offloading
	// engine does: a listener never sees an instant where the worker holds
	// the block on no tier (which, by prefix semantics, would drop every
	// block below it).
	if p.cpu != nil {
		p.cpu.offload(h, p.parent[b], p.hasPar[b], p.tokens[int(b)*p.bs:(int(b)+1)*p.bs], p.salt[b])
	}
	p.emit.removed(engineHash(h, p.hashSeed), kvevent.TierDevice)
}

// release drops one reference; at zero the block becomes free: cached
// blocks join the LRU tail (most recently used), empty ones the stack.
func (p *gpuPool) release(b int32) {
	p.ref[b]--
	if p.ref[b] > 0 {
		return
	}
	if p.cached[b] {
		p.lruPush(b)
	} else {
		p.empty = append(p.empty, b)
	}
}

// cache gives a block that a request just filled its hash.
func (p *gpuPool) cache(b int32, seq, parent uint64, hasParent bool, tokens []uint32, s blockSalt) {
	p.seq[b] = seq
	p.salt[b] = s
	p.parent[b], p.hasPar[b] = parent, hasParent
	p.cached[b] = true
	p.byHash[seq] = b
	if p.tokens != nil {
		copy(p.tokens[int(b)*p.bs:(int(b)+1)*p.bs], tokens)
	}
}

// clear forgets every cached hash; only valid when no block is in use.
func (p *gpuPool) clear() {
	for b := p.head; b != none; b = p.next[b] {
		p.cached[b] = false
		p.empty = append(p.empty, b)
	}
	p.head, p.tail, p.lruLen = none, none, 0
	clear(p.byHash)
}

// cpuPool is the host-memory offload tier: an LRU set of block hashes
// (their content is not needed once their stored event is out).
type cpuPool struct {
	cap    int
	seq    []uint64
	prev   []int32
	next   []int32
	head   int32
	tail   int32
	byHash map[uint64]int32
	emit   *eventLog
	seed   uint64
}

func newCPUPool(n int, emit *eventLog, seed uint64) *cpuPool {
	return &cpuPool{
		cap: n, seq: make([]uint64, 0, n), prev: make([]int32, 0, n), next: make([]int32, 0, n),
		head: none, tail: none, byHash: make(map[uint64]int32), emit: emit, seed: seed,
	}
}

func (c *cpuPool) unlink(i int32) {
	if c.prev[i] != none {
		c.next[c.prev[i]] = c.next[i]
	} else {
		c.head = c.next[i]
	}
	if c.next[i] != none {
		c.prev[c.next[i]] = c.prev[i]
	} else {
		c.tail = c.prev[i]
	}
}

func (c *cpuPool) pushTail(i int32) {
	c.prev[i], c.next[i] = c.tail, none
	if c.tail != none {
		c.next[c.tail] = i
	} else {
		c.head = i
	}
	c.tail = i
}

// has reports whether the tier holds the block and marks it recently used.
func (c *cpuPool) has(seq uint64) bool {
	i, ok := c.byHash[seq]
	if ok {
		c.unlink(i)
		c.pushTail(i)
	}
	return ok
}

// offload copies an evicted device block into the tier (a stored event
// with the CPU medium), evicting the tier's least recently used block for
// good when it is full. A block already there is only refreshed.
func (c *cpuPool) offload(seq, parent uint64, hasParent bool, tokens []uint32, s blockSalt) {
	if c.has(seq) {
		return
	}
	var i int32
	if len(c.seq) < c.cap {
		i = int32(len(c.seq))
		c.seq = append(c.seq, 0)
		c.prev = append(c.prev, none)
		c.next = append(c.next, none)
	} else {
		i = c.head
		c.unlink(i)
		delete(c.byHash, c.seq[i])
		c.emit.removed(engineHash(c.seq[i], c.seed), kvevent.TierHostPinned)
	}
	c.seq[i] = seq
	c.byHash[seq] = i
	c.pushTail(i)
	c.emit.stored(kvevent.TierHostPinned, engineHash(seq, c.seed), engineHash(parent, c.seed), hasParent, tokens, s)
}

func (c *cpuPool) clear() {
	c.seq, c.prev, c.next = c.seq[:0], c.prev[:0], c.next[:0]
	c.head, c.tail = none, none
	clear(c.byHash)
}

func (c *cpuPool) len() int { return len(c.byHash) }
