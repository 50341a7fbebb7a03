package router

import (
	"math/bits"
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// idTable maps worker ids to rank positions: an open-addressing table
// (linear probing, at most half full) rebuilt with the rank table. Route
// looks up the rank of every worker the index scores (up to the whole
// fleet); a Go map lookup cost about 10 ns of that, this one a mix of
// the id with the table's key, a shift and usually one probe.
//
// Worker ids come from the registry and from configuration, so a hostile
// or unlucky fleet can choose them: with an unkeyed multiplicative hash,
// 1,024 ids of the form k·m⁻¹ (m the multiplier) all share one home slot
// and every Route probes the whole table. The key, drawn at random when
// the table is first sized (no clock is read; decisions never depend on
// it), makes colliding ids unpredictable, as Go's maps do with their seed.
type idTable struct {
	slots []idSlot
	shift uint8
	key   uint64 // 0 until the first reset draws it
}

type idSlot struct {
	id  kvevent.WorkerID
	pos int32 // position + 1; 0 marks an empty slot
}

// reset empties the table and sizes it for n ids.
func (t *idTable) reset(n int) {
	for t.key == 0 {
		t.key = rand.Uint64()
	}
	size := 1 << bits.Len(uint(2*n)) // > 2n: at most half full
	if cap(t.slots) >= size {
		t.slots = t.slots[:size]
		clear(t.slots)
	} else {
		t.slots = make([]idSlot, size)
	}
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
}

// home is id's first slot: the key xored in, then a bijective mixer
// (two xor-shift-multiply rounds, as in SplitMix64's finalizer) so every
// bit of the id reaches the top bits the shift keeps.
func (t *idTable) home(id kvevent.WorkerID) int {
	x := uint64(id) ^ t.key
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return int(x >> t.shift)
}

// put maps id to pos (id must not be in the table yet).
func (t *idTable) put(id kvevent.WorkerID, pos int) {
	mask := len(t.slots) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		if t.slots[i].pos == 0 {
			t.slots[i] = idSlot{id: id, pos: int32(pos + 1)}
			return
		}
	}
}

// get returns id's position.
func (t *idTable) get(id kvevent.WorkerID) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	mask := len(t.slots) - 1
	for i := t.home(id); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.pos == 0 {
			return 0, false
		}
		if s.id == id {
			return int(s.pos - 1), true
		}
	}
}
