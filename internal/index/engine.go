package index

// engineTable maps one worker rank's engine block hashes (on one tier) to
// tree nodes, with a reference count (an engine may store the same block
// twice). It is an open-addressing table with parallel key and node arrays
// (12 bytes a slot instead of a Go map's 16 plus control bytes); counts
// above one, which are rare, live in a side map.
type engineTable struct {
	keys  []uint64
	nodes []uint32 // 0 = empty slot (node 0 is the root, never mapped)
	n     int
	multi map[uint64]uint32 // refcount - 1 for hashes stored more than once
}

func engineHash64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

func (t *engineTable) slot(k uint64) (int, bool) {
	mask := len(t.keys) - 1
	for i := int(engineHash64(k)) & mask; ; i = (i + 1) & mask {
		if t.nodes[i] == 0 {
			return i, false
		}
		if t.keys[i] == k {
			return i, true
		}
	}
}

// get returns the node for k (0 when absent).
func (t *engineTable) get(k uint64) uint32 {
	if t == nil || t.n == 0 {
		return 0
	}
	i, ok := t.slot(k)
	if !ok {
		return 0
	}
	return t.nodes[i]
}

// refs returns k's reference count (0 when absent).
func (t *engineTable) refs(k uint64) uint32 {
	if t.get(k) == 0 {
		return 0
	}
	return 1 + t.multi[k]
}

// reserve makes room for one more key and returns k's slot and whether k
// is present; a following fill(i, ...) for an absent k needs no new probe.
func (t *engineTable) reserve(k uint64) (int, bool) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.resize(max(8, len(t.keys)*2))
	}
	return t.slot(k)
}

// fill stores an absent k at the slot reserve returned.
func (t *engineTable) fill(i int, k uint64, node uint32) {
	t.keys[i], t.nodes[i] = k, node
	t.n++
}

// add maps k to node (k must be absent) with count 1.
func (t *engineTable) add(k uint64, node uint32) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.resize(max(8, len(t.keys)*2))
	}
	i, _ := t.slot(k)
	t.keys[i], t.nodes[i] = k, node
	t.n++
}

// incr adds a reference to a present k.
func (t *engineTable) incr(k uint64) {
	if t.multi == nil {
		t.multi = map[uint64]uint32{}
	}
	t.multi[k]++
}

// decr drops a reference to a present k and reports whether it was the
// last one (k is then removed).
func (t *engineTable) decr(k uint64) bool {
	if c := t.multi[k]; c > 0 {
		if c == 1 {
			delete(t.multi, k)
		} else {
			t.multi[k] = c - 1
		}
		return false
	}
	t.del(k)
	return true
}

// del removes k entirely, whatever its count.
func (t *engineTable) del(k uint64) {
	if t.n == 0 {
		return
	}
	i, ok := t.slot(k)
	if !ok {
		return
	}
	delete(t.multi, k)
	mask := len(t.keys) - 1
	for j := (i + 1) & mask; t.nodes[j] != 0; j = (j + 1) & mask {
		home := int(engineHash64(t.keys[j])) & mask
		if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
			t.keys[i], t.nodes[i] = t.keys[j], t.nodes[j]
			i = j
		}
	}
	t.nodes[i] = 0
	t.n--
	if len(t.keys) > 64 && t.n*8 < len(t.keys) {
		t.resize(len(t.keys) / 2)
	}
}

func (t *engineTable) resize(size int) {
	ok, on := t.keys, t.nodes
	t.keys, t.nodes = make([]uint64, size), make([]uint32, size)
	for i, nd := range on {
		if nd != 0 {
			j, _ := t.slot(ok[i])
			t.keys[j], t.nodes[j] = ok[i], nd
		}
	}
}

// each calls f for every (hash, node, refcount).
func (t *engineTable) each(f func(k uint64, node uint32, refs uint32)) {
	if t == nil {
		return
	}
	for i, nd := range t.nodes {
		if nd != 0 {
			f(t.keys[i], nd, 1+t.multi[t.keys[i]])
		}
	}
}

func (t *engineTable) bytes() int64 {
	if t == nil {
		return 0
	}
	return int64(len(t.keys))*12 + int64(len(t.multi))*16
}
