package index

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// MaxReserveBlocks bounds the capacity Reserve accepts for one worker rank
// (2^24 blocks: a 400 MB engine table).
const MaxReserveBlocks = 1 << 24

// Reserve sizes worker rank w's device-tier engine-hash table for blocks
// entries, the rank's KV cache capacity in blocks, so that applying its
// events never doubles the table (each doubling moves every entry and
// touches fresh memory), and keeps it from shrinking below that size. The
// reservation holds across Cleared events and ends with RemoveWorker or
// with Reserve(w, 0). It changes no answer of the index, only its speed
// and memory: the table costs 12 bytes a slot at most 75 % full (about
// 24 bytes per reserved block) from now on.
//
// blocks outside [0, MaxReserveBlocks] is refused with ErrInvalid.
func (x *Index) Reserve(w kvevent.Worker, blocks int) error {
	if blocks < 0 || blocks > MaxReserveBlocks {
		return fmt.Errorf("%w: reserving %d blocks for worker %v (max %d)", ErrInvalid, blocks, w, MaxReserveBlocks)
	}
	slots := reservedSlots(blocks)
	if slots == 0 {
		delete(x.reserved, w)
	} else {
		if x.reserved == nil {
			x.reserved = map[kvevent.Worker]int{}
		}
		x.reserved[w] = slots
	}
	if id, ok := x.byKey[holderKey{w, kindExact}]; ok {
		if m := x.holders[id].engine[kvevent.TierDevice]; m != nil {
			m.setFloor(slots)
		}
	}
	return nil
}

// reservedSlots is the table size that holds blocks entries without
// growing: the smallest power of two with blocks at most 75 % of it (0 for
// no reservation).
func reservedSlots(blocks int) int {
	if blocks <= 0 {
		return 0
	}
	s := 8
	for blocks*4 > s*3 {
		s *= 2
	}
	return s
}

// newEngineTable returns the engine table for holder w on tier t, sized by
// w's reservation.
func (x *Index) newEngineTable(w kvevent.Worker, t kvevent.Tier) *engineTable {
	m := &engineTable{}
	if t == kvevent.TierDevice {
		m.setFloor(x.reserved[w])
	}
	return m
}

// dropReservations forgets the reservations of every rank of worker id.
func (x *Index) dropReservations(id kvevent.WorkerID) {
	for w := range x.reserved {
		if w.ID == id {
			delete(x.reserved, w)
		}
	}
}
