package tokenizer

// pairTable maps a pair of token ids to (rank, merged id). It is an
// open-addressing hash table with linear probing, built once at load and
// read-only afterwards: merge lookups are the innermost operation of BPE,
// and one flat array probe beats a general map there.
type pairTable struct {
	slots []pairSlot
	mask  uint64
	n     int
}

// pairSlot holds ^key so that the zero slot means empty (key ^0 would be the
// pair (0xFFFFFFFF, 0xFFFFFFFF), which no vocabulary reaches).
type pairSlot struct {
	nkey uint64
	val  uint64
}

func newPairTable(hint int) *pairTable {
	size := 1024
	for size < 2*hint {
		size <<= 1
	}
	return &pairTable{slots: make([]pairSlot, size), mask: uint64(size - 1)}
}

func pairHash(key uint64) uint64 {
	key ^= key >> 29
	key *= 0x9E3779B97F4A7C15
	return key ^ key>>32
}

// get returns the value stored for key.
func (t *pairTable) get(key uint64) (uint64, bool) {
	nk := ^key
	for i := pairHash(key) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.nkey == nk {
			return s.val, true
		}
		if s.nkey == 0 {
			return 0, false
		}
	}
}

// set stores val for key, replacing an earlier value.
func (t *pairTable) set(key, val uint64) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	nk := ^key
	for i := pairHash(key) & t.mask; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.nkey == nk {
			s.val = val
			return
		}
		if s.nkey == 0 {
			s.nkey, s.val = nk, val
			t.n++
			return
		}
	}
}

func (t *pairTable) grow() {
	old := t.slots
	t.slots = make([]pairSlot, 2*len(old))
	t.mask = uint64(len(t.slots) - 1)
	t.n = 0
	for _, s := range old {
		if s.nkey != 0 {
			t.set(^s.nkey, s.val)
		}
	}
}

// len returns the number of pairs stored.
func (t *pairTable) len() int { return t.n }
