package tokenizer

import "container/heap"

// model is a byte-level BPE model over token ids: words arrive as raw bytes
// and are merged pair by pair, lowest rank first.
type model struct {
	// byteID is the id of the single-byte token of each byte.
	byteID [256]uint32
	// merges maps a pair of ids (left<<32 | right) to rank<<32 | merged id.
	merges map[uint64]uint64
	// vocab maps a token's raw bytes to its id (used by ignore_merges).
	vocab map[string]uint32
	// ignoreMerges takes a word found whole in vocab as one token.
	ignoreMerges bool
}

// heapThreshold is the word length (in bytes) above which merging uses a
// heap (O(n log n)) instead of the simpler O(n²) scan that is faster for the
// short words that make up almost all text.
const heapThreshold = 48

const noRank = ^uint32(0)

func (m *model) rank(a, b uint32) (rank uint32, id uint32) {
	v, ok := m.merges[uint64(a)<<32|uint64(b)]
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), uint32(v)
}

// appendWord appends the ids of one pre-tokenized word (raw bytes).
func (m *model) appendWord(dst []uint32, word string) []uint32 {
	if len(word) == 0 {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) == 1 {
		return append(dst, m.byteID[word[0]])
	}
	if len(word) > heapThreshold {
		return m.appendHeap(dst, word)
	}
	var symBuf [heapThreshold]uint32
	var rankBuf [heapThreshold]uint32
	var idBuf [heapThreshold]uint32
	n := len(word)
	sym := symBuf[:n]
	for i := 0; i < n; i++ {
		sym[i] = m.byteID[word[i]]
	}
	// ranks[i] / ids[i] describe the pair (sym[i], sym[i+1]).
	ranks, ids := rankBuf[:n-1], idBuf[:n-1]
	for i := 0; i+1 < n; i++ {
		ranks[i], ids[i] = m.rank(sym[i], sym[i+1])
	}
	for len(sym) > 1 {
		best := 0
		for i := 1; i < len(ranks); i++ {
			if ranks[i] < ranks[best] {
				best = i
			}
		}
		if ranks[best] == noRank {
			break
		}
		sym[best] = ids[best]
		copy(sym[best+1:], sym[best+2:])
		sym = sym[:len(sym)-1]
		copy(ranks[best:], ranks[best+1:])
		copy(ids[best:], ids[best+1:])
		ranks, ids = ranks[:len(ranks)-1], ids[:len(ids)-1]
		if best > 0 {
			ranks[best-1], ids[best-1] = m.rank(sym[best-1], sym[best])
		}
		if best < len(ranks) {
			ranks[best], ids[best] = m.rank(sym[best], sym[best+1])
		}
	}
	return append(dst, sym...)
}

// appendHeap is the merge loop for long words: symbols in a doubly linked
// list, candidate merges in a min-heap ordered by (rank, position). Stale
// candidates (a side already merged away) are skipped when popped, as in
// HuggingFace's implementation.
func (m *model) appendHeap(dst []uint32, word string) []uint32 {
	n := len(word)
	syms := make([]heapSym, n)
	for i := 0; i < n; i++ {
		syms[i] = heapSym{id: m.byteID[word[i]], prev: i - 1, next: i + 1, alive: true}
	}
	syms[n-1].next = -1
	h := make(mergeHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		if r, id := m.rank(syms[i].id, syms[i+1].id); r != noRank {
			h = append(h, mergeCand{rank: r, pos: i, left: syms[i].id, right: syms[i+1].id, id: id})
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := heap.Pop(&h).(mergeCand)
		l := &syms[c.pos]
		if !l.alive || l.id != c.left || l.next < 0 {
			continue
		}
		r := &syms[l.next]
		if r.id != c.right {
			continue
		}
		l.id = c.id
		r.alive = false
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.pos
		}
		if l.prev >= 0 {
			p := &syms[l.prev]
			if rk, id := m.rank(p.id, l.id); rk != noRank {
				heap.Push(&h, mergeCand{rank: rk, pos: l.prev, left: p.id, right: l.id, id: id})
			}
		}
		if l.next >= 0 {
			nx := &syms[l.next]
			if rk, id := m.rank(l.id, nx.id); rk != noRank {
				heap.Push(&h, mergeCand{rank: rk, pos: c.pos, left: l.id, right: nx.id, id: id})
			}
		}
	}
	for i := 0; i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	return dst
}

type heapSym struct {
	id         uint32
	prev, next int
	alive      bool
}

type mergeCand struct {
	rank  uint32
	pos   int
	left  uint32
	right uint32
	id    uint32
}

type mergeHeap []mergeCand

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
