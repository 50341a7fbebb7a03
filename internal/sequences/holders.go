package sequences

import "math/bits"

// bitset is a set of worker slots.
type bitset []uint64

func (b bitset) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }
func (b bitset) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) clear(i int)    { b[i>>6] &^= 1 << (uint(i) & 63) }

func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

// each calls f for every slot in the set, ascending.
func (b bitset) each(f func(int)) {
	for wi, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			f(wi<<6 | t)
			w &= w - 1
		}
	}
}

// holders maps a tracked block hash to the set of worker slots on which it
// is active. Rows live in one slab so that adding a hash allocates nothing
// once the slab has grown.
type holders struct {
	words int              // words per row
	idx   map[uint64]int32 // hash -> row
	rows  []uint64         // len(rows) = rowCount*words
	free  []int32
}

func newHolders() *holders {
	return &holders{words: 1, idx: make(map[uint64]int32)}
}

// ensure makes rows wide enough for slot.
func (h *holders) ensure(slot int) {
	need := slot>>6 + 1
	if need <= h.words {
		return
	}
	n := len(h.rows) / h.words
	rows := make([]uint64, n*need)
	for r := range n {
		copy(rows[r*need:], h.rows[r*h.words:(r+1)*h.words])
	}
	h.rows, h.words = rows, need
}

// row returns the holders of hash, or nil.
func (h *holders) row(hash uint64) bitset {
	r, ok := h.idx[hash]
	if !ok {
		return nil
	}
	return h.rows[int(r)*h.words : (int(r)+1)*h.words]
}

func (h *holders) add(hash uint64, slot int) {
	r, ok := h.idx[hash]
	if !ok {
		if n := len(h.free); n > 0 {
			r = h.free[n-1]
			h.free = h.free[:n-1]
		} else {
			r = int32(len(h.rows) / h.words)
			for range h.words {
				h.rows = append(h.rows, 0)
			}
		}
		h.idx[hash] = r
	}
	bitset(h.rows[int(r)*h.words : (int(r)+1)*h.words]).set(slot)
}

func (h *holders) remove(hash uint64, slot int) {
	r, ok := h.idx[hash]
	if !ok {
		return
	}
	row := bitset(h.rows[int(r)*h.words : (int(r)+1)*h.words])
	row.clear(slot)
	if row.empty() {
		delete(h.idx, hash)
		h.free = append(h.free, r)
	}
}
