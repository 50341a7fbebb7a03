package index

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// MaxReserveBlocks bounds the capacity Reserve accepts for one worker rank
// (2^24 blocks: a 400 MB engine table).
const MaxReserveBlocks = 1 << 24

// Reserve tells the index that worker rank w's KV cache holds up to
// blocks blocks (its capacity), and keeps w's device-tier engine-hash
// table from shrinking below the size that holds that many entries, so
// that a worker whose cache churns does not halve and double its table
// over and over. The table is not allocated at that size up front: it
// grows by doubling with the entries w actually stores (each entry is
// moved about once in all), because a fleet of many workers that each
// hold a fraction of their capacity would otherwise pay 24 bytes per
// reserved block for empty slots (1,024 workers of 16,384 blocks: 400 MB
// for a few hundred thousand entries). The reservation holds across
// Cleared events and ends with RemoveWorker or with Reserve(w, 0). It
// changes no answer of the index, only its speed and memory.
//
// blocks outside [0, MaxReserveBlocks] is refused with ErrInvalid.
func (x *Index) Reserve(w kvevent.WorkerRank, blocks int) error {
	if blocks < 0 || blocks > MaxReserveBlocks {
		return fmt.Errorf("%w: reserving %d blocks for worker %v (max %d)", ErrInvalid, blocks, w, MaxReserveBlocks)
	}
	slots := reservedSlots(blocks)
	if slots == 0 {
		delete(x.reserved, w)
	} else {
		if x.reserved == nil {
			x.reserved = map[kvevent.WorkerRank]int{}
		}
		x.reserved[w] = slots
	}
	if id, ok := x.byKey[holderKey{w, kindExact}]; ok {
		if m := x.tabs[id].engine[kvevent.TierDevice]; m != nil {
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
func (x *Index) newEngineTable(w kvevent.WorkerRank, t kvevent.Tier) *engineTable {
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
