package sequences

// trie holds the prompt blocks of one worker rank's running requests as a
// radix tree: each edge is a run of tracking hashes (a slice of the first
// request that brought it, never copied), each node counts the running
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
}

type tnode struct {
	hashes []uint64 // edge label (empty for the root)
	count  int32    // running requests covering the whole edge
	parent *tnode
	kids   []*tnode
	index  map[uint64]*tnode // first hash -> kid, once kids is long
}

const kidsIndexAt = 8

func (n *tnode) child(h uint64) *tnode {
	if n.index != nil {
		return n.index[h]
	}
	for _, k := range n.kids {
		if k.hashes[0] == h {
			return k
		}
	}
	return nil
}

func (n *tnode) addKid(k *tnode) {
	k.parent = n
	n.kids = append(n.kids, k)
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

// split cuts k's edge after m hashes (0 < m < len), inserting a node above
// k that keeps k's count, and returns it. k keeps its identity, so request
// end pointers to k stay valid.
func (t *trie) split(k *tnode, m int) *tnode {
	mid := &tnode{hashes: k.hashes[:m:m], count: k.count}
	k.parent.replaceKid(k, mid)
	k.hashes = k.hashes[m:]
	mid.addKid(k)
	return mid
}

// add books a path of tracking hashes and returns the node where it ends
// (the root for an empty path).
func (t *trie) add(h []uint64) *tnode {
	n := &t.root
	for i := 0; i < len(h); {
		c := n.child(h[i])
		if c == nil {
			c = &tnode{hashes: h[i:len(h):len(h)], count: 1}
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
		}
		n = p
	}
}

// held returns how many leading hashes of h the trie holds.
func (t *trie) held(h []uint64) int {
	n, i := &t.root, 0
	for i < len(h) {
		c := n.child(h[i])
		if c == nil {
			return i
		}
		m := lcp(c.hashes, h[i:])
		i += m
		if m < len(c.hashes) {
			return i
		}
		n = c
	}
	return i
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
