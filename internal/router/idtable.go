package router

import (
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// idTable maps worker ids to rank positions: an open-addressing table
// (linear probing, at most half full) rebuilt with the rank table. Route
// looks up the rank of every worker the index scores (up to the whole
// fleet); a Go map lookup cost about 10 ns of that, this one a multiply,
// a shift and usually one probe.
type idTable struct {
	slots []idSlot
	shift uint8
}

type idSlot struct {
	id  kvevent.WorkerID
	pos int32 // position + 1; 0 marks an empty slot
}

// reset empties the table and sizes it for n ids.
func (t *idTable) reset(n int) {
	size := 1 << bits.Len(uint(2*n)) // > 2n: at most half full
	if cap(t.slots) >= size {
		t.slots = t.slots[:size]
		clear(t.slots)
	} else {
		t.slots = make([]idSlot, size)
	}
	t.shift = uint8(64 - bits.TrailingZeros(uint(size)))
}

func (t *idTable) home(id kvevent.WorkerID) int {
	return int((uint64(id) * 0x9e3779b97f4a7c15) >> t.shift)
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
