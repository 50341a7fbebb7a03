package index

// childTable finds a node's child by local hash. It is an open-addressing
// hash set of node ids (linear probing, backward-shift deletion) whose keys
// (parent id, local hash) live in the nodes themselves, so a child costs 4
// bytes of table instead of a per-node map.
type childTable struct {
	slots []uint32 // node ids; 0 = empty
	n     int
}

func childHash(parent uint32, local uint64) uint64 {
	x := local ^ (uint64(parent) * 0x9e3779b97f4a7c15)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// find returns the child of parent with the given local hash, or 0.
func (t *childTable) find(ns *nodes, parent uint32, local uint64) uint32 {
	// Fast path: the most recently added child (chains stored in one
	// event are adjacent in memory, so this is usually a cache hit).
	f := ns.at(parent).first
	if f == 0 {
		return 0 // a leaf: the common case when a chain grows
	}
	if ns.at(f).local == local {
		return f
	}
	if ns.at(f).next == 0 {
		return 0 // the only child did not match
	}
	if len(t.slots) == 0 {
		return 0
	}
	mask := uint64(len(t.slots) - 1)
	for i := childHash(parent, local) & mask; ; i = (i + 1) & mask {
		id := t.slots[i]
		if id == 0 {
			return 0
		}
		n := ns.at(id)
		if n.local == local && n.parent == parent {
			return id
		}
	}
}

// link registers a freshly allocated child n, id (already linked as its
// parent's first child): when it has siblings, it and the previous first
// child must be findable through the table.
func (t *childTable) link(ns *nodes, id uint32, n *node) {
	if n.next == 0 {
		return // sole child
	}
	t.insert(ns, id)
	n.lower |= inKids
	if o := ns.at(n.next); o.lower&inKids == 0 {
		t.insert(ns, n.next)
		o.lower |= inKids
	}
}

// unlink forgets a node about to be freed.
func (t *childTable) unlink(ns *nodes, id uint32) {
	if n := ns.at(id); n.lower&inKids != 0 {
		t.remove(ns, id)
		n.lower &^= inKids
	}
}

// insert adds a node that is known to be absent.
func (t *childTable) insert(ns *nodes, id uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(ns, max(16, len(t.slots)*2))
	}
	t.place(ns, id)
	t.n++
}

func (t *childTable) place(ns *nodes, id uint32) {
	n := ns.at(id)
	mask := uint64(len(t.slots) - 1)
	i := childHash(n.parent, n.local) & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = id
}

// remove deletes a node that is present.
func (t *childTable) remove(ns *nodes, id uint32) {
	n := ns.at(id)
	mask := uint64(len(t.slots) - 1)
	i := childHash(n.parent, n.local) & mask
	for t.slots[i] != id {
		if t.slots[i] == 0 {
			return // not present: nothing to do
		}
		i = (i + 1) & mask
	}
	// Backward-shift deletion keeps probe chains intact without tombstones.
	for j := (i + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		m := ns.at(t.slots[j])
		home := childHash(m.parent, m.local) & mask
		// Move slot j into the hole i if its home is not in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
	if len(t.slots) > 1024 && t.n*8 < len(t.slots) {
		t.resize(ns, len(t.slots)/2)
	}
}

func (t *childTable) resize(ns *nodes, size int) {
	old := t.slots
	t.slots = make([]uint32, size)
	for _, id := range old {
		if id != 0 {
			t.place(ns, id)
		}
	}
}

func (t *childTable) bytes() int64 { return int64(len(t.slots)) * 4 }
