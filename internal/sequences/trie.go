package sequences

import "math/bits"

// trie holds the prompt blocks of one worker rank's running requests as a
// radix tree: each edge is a run of tracking hashes (copied from the first
// request that brought it when it creates the edge; later splits share that
// copy), each node counts the running
// requests whose path covers its edge. The number of distinct active blocks
// is the sum of the live edges' lengths, kept in blocks.
//
// Why a trie and not a hash set: booking a request touches only the nodes
// on its path and compares hashes sequentially, and freeing it walks the
// same path back; a hash set costs a random memory access per block, which
// for 1,024-block prompts was the router's dominant cost. The leading
// overlap of a candidate (Potential) is one walk down the trie.
type trie struct {
	root   tnode
	blocks int
	chunks *chunkPool // where edge labels come from and go back to
}

type tnode struct {
	hashes []uint64 // edge label (empty for the root)
	last   uint64   // hashes[len(hashes)-1]: held matches a whole edge without reading its label
	chunk  *chunk   // the copy hashes is part of (shared after a split)
	count  int32    // running requests covering the whole edge
	parent *tnode
	kids   []*tnode
	firsts []uint64          // firsts[i] = kids[i].hashes[0], scanned without touching the kids
	index  map[uint64]*tnode // first hash -> kid, once kids is long
}

const kidsIndexAt = 8

func (n *tnode) child(h uint64) *tnode {
	if n.index != nil {
		return n.index[h]
	}
	// The first hashes sit in one array: a lookup touches one line, not
	// every kid (Potential walks the tries of every worker sharing the
	// candidate's first block).
	for i, f := range n.firsts {
		if f == h {
			return n.kids[i]
		}
	}
	return nil
}

func (n *tnode) addKid(k *tnode) {
	k.parent = n
	n.kids = append(n.kids, k)
	n.firsts = append(n.firsts, k.hashes[0])
	switch {
	case n.index != nil:
		n.index[k.hashes[0]] = k
	case len(n.kids) > kidsIndexAt:
		n.index = make(map[uint64]*tnode, len(n.kids))
		for _, c := range n.kids {
			n.index[c.hashes[0]] = c
		}
	}
}

func (n *tnode) removeKid(k *tnode) {
	for i, c := range n.kids {
		if c == k {
			last := len(n.kids) - 1
			n.kids[i] = n.kids[last]
			n.kids[last] = nil
			n.kids = n.kids[:last]
			n.firsts[i] = n.firsts[last]
			n.firsts = n.firsts[:last]
			break
		}
	}
	if n.index != nil {
		delete(n.index, k.hashes[0])
		if len(n.kids) == 0 {
			n.index = nil
		}
	}
}

// replaceKid puts nk where k was (same first hash).
func (n *tnode) replaceKid(k, nk *tnode) {
	for i, c := range n.kids {
		if c == k {
			n.kids[i] = nk
		}
	}
	if n.index != nil {
		n.index[k.hashes[0]] = nk
	}
	nk.parent = n
}

// lcp returns the length of the common prefix of a and b.
func lcp(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// seqLCP is lcp for runs of sequence hashes, which identify their whole
// prefix: once two runs differ at a position they differ at every later
// one, so the common prefix is found by checking the last position and
// otherwise binary-searching the first difference, O(log n) instead of
// O(n). On runs without that property it still returns a valid length,
// only not necessarily the exact common prefix.
func seqLCP(a, b []uint64) int {
	n := min(len(a), len(b))
	if n == 0 || a[0] != b[0] {
		return 0
	}
	if a[n-1] == b[n-1] {
		return n
	}
	lo, hi := 1, n-1 // a[lo-1] == b[lo-1], a[hi] != b[hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a[m] == b[m] {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// split cuts k's edge after m hashes (0 < m < len), inserting a node above
// k that keeps k's count, and returns it. k keeps its identity, so request
// end pointers to k stay valid.
func (t *trie) split(k *tnode, m int) *tnode {
	mid := &tnode{hashes: k.hashes[:m:m], last: k.hashes[m-1], chunk: k.chunk, count: k.count}
	k.chunk.refs++
	k.parent.replaceKid(k, mid)
	k.hashes = k.hashes[m:]
	mid.addKid(k)
	return mid
}

// add books a path of tracking hashes and returns the node where it ends
// (the root for an empty path). It copies the part of h it keeps (the
// suffix no running request shares), so h may be reused afterwards.
func (t *trie) add(h []uint64) *tnode {
	n := &t.root
	for i := 0; i < len(h); {
		c := n.child(h[i])
		if c == nil {
			ch := t.chunks.get(len(h) - i)
			c = &tnode{hashes: ch.buf[: len(h)-i : len(h)-i], last: h[len(h)-1], chunk: ch, count: 1}
			copy(c.hashes, h[i:])
			n.addKid(c)
			t.blocks += len(h) - i
			return c
		}
		m := lcp(c.hashes, h[i:])
		if m < len(c.hashes) {
			c = t.split(c, m)
		}
		c.count++
		i += m
		n = c
	}
	return n
}

// remove releases the path ending at end.
func (t *trie) remove(end *tnode) {
	for n := end; n != &t.root; {
		p := n.parent
		n.count--
		if n.count <= 0 {
			p.removeKid(n)
			t.blocks -= len(n.hashes)
			n.parent = nil
			if n.chunk.refs--; n.chunk.refs == 0 {
				t.chunks.put(n.chunk)
			}
			n.hashes, n.chunk = nil, nil
		}
		n = p
	}
}

// held returns how many leading hashes of h the trie holds. h must be
// sequence hashes (see seqLCP): each edge costs one comparison when the
// request covers it whole, with the edge's last hash, kept in its node
// (the label's first and last hashes would be two more cache misses per
// worker: Potential walks the trie of every worker sharing the
// candidate's first block).
func (t *trie) held(h []uint64) int {
	n, i := &t.root, 0
	for i < len(h) {
		c := n.child(h[i])
		if c == nil {
			return i
		}
		// c's first hash is h[i] (child); equal last hashes mean the
		// whole edge is held, as seqLCP would find.
		if l := len(c.hashes); l <= len(h)-i && c.last == h[i+l-1] {
			i += l
			n = c
			continue
		}
		m := seqLCP(c.hashes, h[i:])
		i += m
		if m < len(c.hashes) {
			return i
		}
		n = c
	}
	return i
}

// top returns the top edge (the root's kid) of the path ending at end, or
// nil for the root.
func (t *trie) top(end *tnode) *tnode {
	if end == &t.root {
		return nil
	}
	n := end
	for n.parent != &t.root {
		n = n.parent
	}
	return n
}

// singles returns how many blocks on the path ending at end are covered by
// one request only.
func (t *trie) singles(end *tnode) int {
	s := 0
	for n := end; n != &t.root && n != nil; n = n.parent {
		if n.count == 1 {
			s += len(n.hashes)
		}
	}
	return s
}

// chunk is a copy of tracking hashes that edge labels slice; refs counts
// the nodes whose label is part of it.
type chunk struct {
	buf  []uint64
	refs int32
}

// chunkPool recycles the copies of freed requests' hashes: booking a
// 1,024-block prompt would otherwise allocate 8 KB per request, and the
// garbage collections that follow show in routing's tail latency. Chunks
// come in power-of-two sizes; each size keeps at most chunkPoolKeep free
// ones, so the pool holds at most about twice the largest recent working
// set.
type chunkPool struct {
	free [64][]*chunk
}

const chunkPoolKeep = 64

func (p *chunkPool) get(n int) *chunk {
	c := bits.Len(uint(n - 1))
	if l := len(p.free[c]); l > 0 {
		ch := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		ch.refs = 1
		return ch
	}
	return &chunk{buf: make([]uint64, 1<<c), refs: 1}
}

func (p *chunkPool) put(ch *chunk) {
	c := bits.Len(uint(len(ch.buf) - 1))
	if len(p.free[c]) < chunkPoolKeep {
		p.free[c] = append(p.free[c], ch)
	}
}
