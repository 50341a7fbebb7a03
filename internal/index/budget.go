package index

import (
	"slices"
	"sync/atomic"
)

// liveBytes estimates the memory the index's live content needs: nodes,
// child-table slots, holder lists, engine-hash entries and approximate
// expiries. It is what MaxBytes is compared with.
func (x *Index) liveBytes() int64 {
	b := int64(x.ns.live)*nodeSize + x.kids.bytes()/2 + int64(x.ns.xlen)*4 + int64(x.approx.entries)*40
	for i := range x.holders {
		b += int64(x.tabs[i].entries) * 20
	}
	return b
}

func (x *Index) growUsed(nid uint32) {
	if x.cfg.MaxBytes == 0 {
		return
	}
	for int(nid) >= len(x.used) {
		x.used = append(x.used, 0)
	}
}

// touch marks a node as just used (stored or matched). Queries call it
// concurrently with each other, hence the atomic store.
func (x *Index) touch(nid uint32) {
	if x.used != nil {
		atomic.StoreUint32(&x.used[nid], atomic.LoadUint32(&x.tick))
	}
}

// enforceBudget evicts the least recently matched nodes (with everything
// held below them) until the estimate is under 90 % of MaxBytes. Eviction
// only removes entries, so it can lower a score, never raise one.
func (x *Index) enforceBudget() {
	if x.cfg.MaxBytes == 0 || x.liveBytes() <= x.cfg.MaxBytes {
		return
	}
	target := x.cfg.MaxBytes * 9 / 10
	var cand []uint32
	for id := uint32(1); int(id) < x.ns.allocated(); id++ {
		if x.ns.at(id).n > 0 {
			cand = append(cand, id)
		}
	}
	slices.SortFunc(cand, func(a, b uint32) int {
		ua, ub := x.used[a], x.used[b]
		if ua != ub {
			if ua < ub {
				return -1
			}
			return 1
		}
		// Deeper (higher id is no proxy); keep a stable order by id.
		return int(int64(b) - int64(a))
	})
	var single [1]uint32
	for _, nid := range cand {
		if x.liveBytes() <= target {
			break
		}
		n := x.ns.at(nid)
		if n.n == 0 {
			continue // freed by an earlier eviction
		}
		ids := slices.Clone(x.ns.holders(n, &single))
		parent := n.parent
		for _, e := range ids {
			before := x.holders[entryID(e)].blocks
			x.dropSubtree(entryID(e), nid, false)
			x.stats.evicted += uint64(before - x.holders[entryID(e)].blocks)
			x.afterDrop(entryID(e), parent)
		}
	}
}
