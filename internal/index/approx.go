package index

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// approxItem is one (holder, node) expiry in the prune heap. Items are
// invalidated lazily: an item is live only while the holder's expiry map
// still has the same expiry for the node.
type approxItem struct {
	expiry int64
	depth  uint32
	holder uint32
	node   uint32
}

type approxHeap []approxItem

func (h approxHeap) Len() int { return len(h) }
func (h approxHeap) Less(i, j int) bool {
	if h[i].expiry != h[j].expiry {
		return h[i].expiry < h[j].expiry
	}
	return h[i].depth < h[j].depth
}
func (h approxHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *approxHeap) Push(v any)   { *h = append(*h, v.(approxItem)) }
func (h *approxHeap) Pop() any {
	old := *h
	v := old[len(old)-1]
	*h = old[:len(old)-1]
	return v
}

type approxState struct {
	heap    approxHeap
	entries int // live approximate and predicted (holder, node) entries
}

// Record notes that the router sent a request with these local hashes to
// worker rank w at time now: w is assumed to hold them (approximate mode,
// for workers that publish no KV events) until now + ApproxTTL. Recording
// again refreshes the TTL. Expired entries are dropped, then the size cap
// is enforced.
func (x *Index) Record(w kvevent.Worker, local []uint64, now time.Time) error {
	return x.record(w, kindApprox, local, now, x.cfg.ApproxTTL)
}

// Predict records a short-lived predict-on-route entry for an exact worker:
// until now + PredictTTL, queries credit w with these blocks unless its
// real (event-fed) score is higher; the per-worker maximum wins.
func (x *Index) Predict(w kvevent.Worker, local []uint64, now time.Time) error {
	return x.record(w, kindPredict, local, now, x.cfg.PredictTTL)
}

func (x *Index) record(w kvevent.Worker, kind holderKind, local []uint64, now time.Time, ttl time.Duration) error {
	if len(local) > x.cfg.MaxBlocksPerEvent {
		x.stats.invalid++
		return fmt.Errorf("%w: %d blocks in one record (max %d)", ErrInvalid, len(local), x.cfg.MaxBlocksPerEvent)
	}
	x.Expire(now)
	if len(local) == 0 {
		return nil
	}
	id, err := x.holderID(w, kind, true)
	if err != nil {
		return err
	}
	h := &x.holders[id]
	if h.expiry == nil {
		h.expiry = make(map[uint32]int64, len(local))
	}
	exp := now.Add(ttl).UnixNano()
	var parent uint32
	for i, lh := range local {
		nid := x.kids.find(x.ns, parent, lh)
		if nid == 0 {
			nid = x.ns.alloc(parent, lh)
			x.kids.link(x.ns, nid)
			x.growUsed(nid)
		}
		n := x.ns.at(nid)
		if _, _, held := x.ns.find(n, id); !held {
			x.ns.setMask(n, id, deviceMask)
			h.blocks++
		}
		if _, ok := h.expiry[nid]; !ok {
			x.approx.entries++
		}
		h.expiry[nid] = exp
		heap.Push(&x.approx.heap, approxItem{expiry: exp, depth: uint32(i), holder: id, node: nid})
		x.touch(nid)
		parent = nid
	}
	if len(x.approx.heap) > 4*x.approx.entries+1024 {
		x.rebuildHeap()
	}
	if x.approx.entries > x.cfg.ApproxMaxBlocks {
		target := int(float64(x.cfg.ApproxMaxBlocks) * x.cfg.PruneRatio)
		for x.approx.entries > target && len(x.approx.heap) > 0 {
			it := heap.Pop(&x.approx.heap).(approxItem)
			if x.itemLive(it) {
				before := x.approx.entries
				x.dropSubtree(it.holder, it.node, false)
				x.stats.pruned += uint64(before - x.approx.entries)
			}
		}
	}
	x.enforceBudget()
	return nil
}

func (x *Index) itemLive(it approxItem) bool {
	h := &x.holders[it.holder]
	if !h.live || h.expiry == nil {
		return false
	}
	e, ok := h.expiry[it.node]
	return ok && e == it.expiry
}

func (x *Index) rebuildHeap() {
	old := x.approx.heap
	x.approx.heap = old[:0:0]
	for _, it := range old {
		if x.itemLive(it) {
			x.approx.heap = append(x.approx.heap, it)
		}
	}
	heap.Init(&x.approx.heap)
}

// Expire drops approximate and predicted entries whose TTL ended at or
// before now (and, by prefix semantics, the holder's blocks below them).
func (x *Index) Expire(now time.Time) {
	t := now.UnixNano()
	for len(x.approx.heap) > 0 && x.approx.heap[0].expiry <= t {
		it := heap.Pop(&x.approx.heap).(approxItem)
		if x.itemLive(it) {
			before := x.approx.entries
			x.dropSubtree(it.holder, it.node, false)
			x.stats.expired += uint64(before - x.approx.entries)
		}
	}
}
