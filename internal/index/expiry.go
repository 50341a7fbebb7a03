package index

// expiryTable maps a holder's recorded nodes to their expiry (unix ns): an
// open-addressing hash table (linear probing, backward-shift deletion)
// with 16-byte slots, so that Record finds and updates a block in one
// probe sequence and allocates nothing once the table has grown. Node ids
// of a chain are mostly consecutive (allocated, and reused from the free
// list, in chain order), so ids that differ only in their low three bits
// share a neighbourhood of slots: walking a chain touches few cache lines.
type expiryTable struct {
	slots []expirySlot
	n     int
}

type expirySlot struct {
	node uint32 // 0 = empty (the root is never recorded)
	exp  int64
}

const expiryGroupBits = 3

func (t *expiryTable) home(nid uint32) uint64 {
	g := uint64(nid>>expiryGroupBits) * 0x9e3779b97f4a7c15
	g ^= g >> 29
	return (g<<expiryGroupBits | uint64(nid&(1<<expiryGroupBits-1))) & uint64(len(t.slots)-1)
}

// get returns node nid's expiry.
func (t *expiryTable) get(nid uint32) (int64, bool) {
	if t.n == 0 {
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(nid); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == nid {
			return s.exp, true
		}
		if s.node == 0 {
			return 0, false
		}
	}
}

// set stores node nid's expiry and reports whether nid was new.
func (t *expiryTable) set(nid uint32, exp int64) bool {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(16, len(t.slots)*2))
	}
	mask := uint64(len(t.slots) - 1)
	for i := t.home(nid); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == nid {
			s.exp = exp
			return false
		}
		if s.node == 0 {
			*s = expirySlot{node: nid, exp: exp}
			t.n++
			return true
		}
	}
}

// del removes node nid and reports whether it was present.
func (t *expiryTable) del(nid uint32) bool {
	if t.n == 0 {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(nid)
	for t.slots[i].node != nid {
		if t.slots[i].node == 0 {
			return false
		}
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		home := t.home(t.slots[j].node)
		// Move slot j into the hole i unless its home is in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = expirySlot{}
	t.n--
	if len(t.slots) > 1024 && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return true
}

// each calls f for every recorded node.
func (t *expiryTable) each(f func(nid uint32, exp int64)) {
	for _, s := range t.slots {
		if s.node != 0 {
			f(s.node, s.exp)
		}
	}
}

func (t *expiryTable) resize(size int) {
	old := t.slots
	t.slots = make([]expirySlot, size)
	mask := uint64(size - 1)
	for _, s := range old {
		if s.node == 0 {
			continue
		}
		i := t.home(s.node)
		for t.slots[i].node != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
