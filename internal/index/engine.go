package index

import (
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// engineTable maps one worker rank's engine block hashes (on one tier) to
// tree nodes, with a reference count (an engine may store the same block
// twice). It is an open-addressing table (linear probing, backward-shift
// deletion) of 12-byte slots holding key and node together, so a lookup
// touches one cache line; a Go map would take 16 bytes a slot plus
// control bytes. Counts above one, which are rare, live in a side map.
type engineTable struct {
	slots []engineSlot
	n     int
	floor int               // slots the table never shrinks below once grown past (Reserve); 0 = none
	multi map[uint64]uint32 // refcount - 1 for hashes stored more than once
}

// engineSlot is one slot, the key split in two words so that the slot
// needs no padding.
type engineSlot struct {
	lo, hi uint32
	node   uint32 // 0 = empty slot (node 0 is the root, never mapped)
}

func (s *engineSlot) key() uint64 { return uint64(s.hi)<<32 | uint64(s.lo) }

func engineHash64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

func (t *engineTable) slot(k uint64) (int, bool) {
	mask := len(t.slots) - 1
	lo, hi := uint32(k), uint32(k>>32)
	for i := int(engineHash64(k)) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.node == 0 {
			return i, false
		}
		if s.lo == lo && s.hi == hi {
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
	return t.slots[i].node
}

// prefetch loads the home slot of every key, and the slot five further
// (the next cache line, where a probe or a deletion's backward shift often
// continues), and returns a meaningless sum (the caller keeps it so the
// loads are not optimised away). The loads do not depend on each other, so
// the processor overlaps their cache misses; the probes that follow then
// hit the cache. It changes nothing.
func (t *engineTable) prefetch(keys []uint64) uint32 {
	if t == nil || len(t.slots) == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	var sum uint32
	for _, k := range keys {
		i := int(engineHash64(k))
		sum += t.slots[i&mask].node + t.slots[(i+5)&mask].node
	}
	return sum
}

// prefetchSlot starts loading k's home slot and the line after it
// without waiting (see prefetchLines). It changes nothing.
func (t *engineTable) prefetchSlot(k uint64) {
	if len(t.slots) == 0 {
		return
	}
	prefetchLines(unsafe.Pointer(&t.slots[int(engineHash64(k))&(len(t.slots)-1)]))
}

// prefetchBlocks is prefetch for the engine hashes of stored blocks.
func (t *engineTable) prefetchBlocks(bs []kvevent.Block) uint32 {
	if t == nil || len(t.slots) == 0 {
		return 0
	}
	mask := len(t.slots) - 1
	var sum uint32
	for j := range bs {
		i := int(engineHash64(bs[j].EngineHash))
		sum += t.slots[i&mask].node + t.slots[(i+5)&mask].node
	}
	return sum
}

// take drops one reference to k with a single probe: it returns k's node
// (0 when absent) and whether that was the last reference (k is then
// removed). It is get followed by decr.
func (t *engineTable) take(k uint64) (node uint32, last bool) {
	if t == nil || t.n == 0 {
		return 0, false
	}
	i, ok := t.slot(k)
	if !ok {
		return 0, false
	}
	node = t.slots[i].node
	if len(t.multi) > 0 {
		if c := t.multi[k]; c > 0 {
			if c == 1 {
				delete(t.multi, k)
			} else {
				t.multi[k] = c - 1
			}
			return node, false
		}
	}
	t.deleteAt(i)
	return node, true
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
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(8, len(t.slots)*2))
	}
	return t.slot(k)
}

// fill stores an absent k at the slot reserve returned.
func (t *engineTable) fill(i int, k uint64, node uint32) {
	t.slots[i] = engineSlot{lo: uint32(k), hi: uint32(k >> 32), node: node}
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
	if len(t.multi) > 0 {
		delete(t.multi, k)
	}
	t.deleteAt(i)
}

// minShrink is the table size (slots) at or below which a table never
// shrinks: 12 KB, so that a worker whose few blocks come and go does not
// resize its table back and forth on every event.
const minShrink = 1024

// deleteAt empties slot i (whose key has no extra references).
func (t *engineTable) deleteAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].node != 0; j = (j + 1) & mask {
		home := int(engineHash64(t.slots[j].key())) & mask
		if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = engineSlot{}
	t.n--
	if len(t.slots) > max(minShrink, t.floor) && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

// setFloor keeps the table from shrinking below slots (a power of two, or
// 0). It allocates nothing: the table still grows by doubling as keys
// arrive, so a worker that holds few blocks costs few slots whatever its
// capacity.
func (t *engineTable) setFloor(slots int) { t.floor = slots }

func (t *engineTable) resize(size int) {
	old := t.slots
	t.slots = make([]engineSlot, size)
	// Write one slot of every 4 KB page first: a fresh page's first access
	// is then a write (one page fault) rather than the read of a probe
	// (which maps the zero page) followed by a write (a second fault).
	for i := 0; i < size; i += 4096 / 12 {
		t.slots[i] = engineSlot{}
	}
	for _, s := range old {
		if s.node != 0 {
			j, _ := t.slot(s.key())
			t.slots[j] = s
		}
	}
}

// each calls f for every (hash, node, refcount).
func (t *engineTable) each(f func(k uint64, node uint32, refs uint32)) {
	if t == nil {
		return
	}
	for i := range t.slots {
		if s := &t.slots[i]; s.node != 0 {
			f(s.key(), s.node, 1+t.multi[s.key()])
		}
	}
}
