package index

import (
	"fmt"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// approxItem is one recorded run in the expiry heap: holder recorded the
// root path ending at node leaf (at depth leafDepth) with this expiry.
//
// A Record stamps every node of its path with the same expiry, so one item
// per call is enough: the entries of the run that still carry its expiry
// are the nodes walked up from leaf while the holder's expiry stays equal
// (a later Record of a prefix moves that prefix to its own expiry). The
// run's top is the shallowest of them, and dropping the holder's subtree
// there drops them all. Items are checked lazily: an item whose leaf no
// longer carries its expiry is stale and skipped.
//
// Invariant: every live (holder, node, expiry) entry has an item whose
// walk reaches it. Record keeps it by pushing its own item. Expiry and
// pruning drop a run from its top, whose parent carries another expiry, so
// no other run's walk went through what they drop; the byte budget drops
// at any node, so it pushes an item for the holder's parent of the
// dropped node (afterDrop).
type approxItem struct {
	expiry    int64
	depth     uint32 // lower bound of the run top's depth (0 = a root child)
	leafDepth uint32
	holder    uint32
	leaf      uint32
}

func (a approxItem) less(b approxItem) bool {
	if a.expiry != b.expiry {
		return a.expiry < b.expiry
	}
	return a.depth < b.depth
}

// approxHeap is a binary min-heap of items by (expiry, depth). It is typed
// (container/heap would box every pushed item).
type approxHeap []approxItem

func (h *approxHeap) push(it approxItem) {
	s := append(*h, it)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
	*h = s
}

func (h *approxHeap) pop() approxItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && s[r].less(s[l]) {
			m = r
		}
		if !s[m].less(s[i]) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
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
func (x *Index) Record(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	return x.record(w, kindApprox, local, now, x.cfg.ApproxTTL)
}

// Predict records a short-lived predict-on-route entry for an exact worker:
// until now + PredictTTL, queries credit w with these blocks unless its
// real (event-fed) score is higher; the per-worker maximum wins.
func (x *Index) Predict(w kvevent.WorkerRank, local []uint64, now time.Time) error {
	return x.record(w, kindPredict, local, now, x.cfg.PredictTTL)
}

func (x *Index) record(w kvevent.WorkerRank, kind holderKind, local []uint64, now time.Time, ttl time.Duration) error {
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
	tb := &x.tabs[id]
	if tb.expiry == nil {
		tb.expiry = &expiryTable{}
	}
	exp := now.Add(ttl).UnixNano()
	var parent uint32
	for _, lh := range local {
		nid := x.kids.find(x.ns, parent, lh)
		if nid == 0 {
			var n *node
			nid, n = x.ns.alloc(parent, lh)
			x.kids.link(x.ns, nid, n)
			x.growUsed(nid)
		}
		n := x.ns.at(nid)
		if _, _, held := x.ns.find(n, id); !held {
			x.ns.setMask(n, id, deviceMask)
			h.blocks++
		}
		if tb.expiry.set(nid, exp) {
			x.approx.entries++
		}
		x.touch(nid)
		parent = nid
	}
	x.approx.heap.push(approxItem{expiry: exp, leafDepth: uint32(len(local) - 1), holder: id, leaf: parent})
	if len(x.approx.heap) > 2*x.approx.entries+1024 {
		x.rebuildHeap()
	}
	if x.approx.entries > x.cfg.ApproxMaxBlocks {
		target := int(float64(x.cfg.ApproxMaxBlocks) * x.cfg.PruneRatio)
		for x.approx.entries > target && len(x.approx.heap) > 0 {
			it := x.approx.heap.pop()
			top, depth, ok := x.runTop(it)
			if !ok {
				continue
			}
			if depth > it.depth {
				// Its shallow part was refreshed meanwhile: requeue
				// under the depth where the run now starts, so ties
				// go shallower first across runs.
				it.depth = depth
				x.approx.heap.push(it)
				continue
			}
			before := x.approx.entries
			x.dropSubtree(it.holder, top, false)
			x.stats.pruned += uint64(before - x.approx.entries)
		}
	}
	x.enforceBudget()
	return nil
}

// itemLive reports whether the item's leaf still carries its expiry.
func (x *Index) itemLive(it approxItem) bool {
	h := &x.holders[it.holder]
	tb := &x.tabs[it.holder]
	if !h.live || tb.expiry == nil {
		return false
	}
	e, held := tb.expiry.get(it.leaf)
	return held && e == it.expiry
}

// runTop returns the shallowest node of the item's run that still carries
// its expiry, and that node's depth; ok is false for a stale item.
func (x *Index) runTop(it approxItem) (top, depth uint32, ok bool) {
	if !x.itemLive(it) {
		return 0, 0, false
	}
	tb := &x.tabs[it.holder]
	top, depth = it.leaf, it.leafDepth
	// Walk up to the root if the expiry says so, whatever leafDepth says:
	// a stale item of a dropped holder can name a reused holder id and a
	// reused node that the new holder recorded at the same instant (same
	// expiry) at another depth. Stopping at leafDepth would then drop the
	// bottom of the new run only, and leave its top with no item to expire
	// it (found by TestApproxAndPredictMatchModel). Walking on makes such
	// an item drop exactly what the run's own item would.
	for {
		p := x.ns.at(top).parent
		if p == 0 {
			break
		}
		if e, held := tb.expiry.get(p); !held || e != it.expiry {
			break
		}
		top = p
		if depth > 0 {
			depth--
		}
	}
	return top, depth, true
}

// rebuildHeap drops stale items and duplicates, in place: a sorted slice
// is a valid heap.
func (x *Index) rebuildHeap() {
	s := x.approx.heap
	live := s[:0]
	for _, it := range s {
		if x.itemLive(it) {
			live = append(live, it)
		}
	}
	slices.SortFunc(live, func(a, b approxItem) int {
		switch {
		case a.expiry != b.expiry:
			return cmpInt(a.expiry, b.expiry)
		case a.depth != b.depth:
			return cmpInt(a.depth, b.depth)
		case a.holder != b.holder:
			return cmpInt(a.holder, b.holder)
		}
		return cmpInt(a.leaf, b.leaf)
	})
	live = slices.CompactFunc(live, func(a, b approxItem) bool {
		return a.expiry == b.expiry && a.holder == b.holder && a.leaf == b.leaf
	})
	clear(s[len(live):])
	x.approx.heap = live
}

func cmpInt[T int64 | uint32](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// afterDrop keeps the expiry invariant after the byte budget dropped
// holder id's subtree at a node whose parent is p: when the holder still
// has p with an expiry, some run may now end at p.
func (x *Index) afterDrop(id, p uint32) {
	tb := &x.tabs[id]
	if p == 0 || tb.expiry == nil {
		return
	}
	e, ok := tb.expiry.get(p)
	if !ok {
		return
	}
	var d uint32
	for q := x.ns.at(p).parent; q != 0; q = x.ns.at(q).parent {
		d++
	}
	x.approx.heap.push(approxItem{expiry: e, leafDepth: d, holder: id, leaf: p})
}

// Expire drops approximate and predicted entries whose TTL ended at or
// before now (and, by prefix semantics, the holder's blocks below them).
func (x *Index) Expire(now time.Time) {
	t := now.UnixNano()
	for len(x.approx.heap) > 0 && x.approx.heap[0].expiry <= t {
		it := x.approx.heap.pop()
		if top, _, ok := x.runTop(it); ok {
			before := x.approx.entries
			x.dropSubtree(it.holder, top, false)
			x.stats.expired += uint64(before - x.approx.entries)
		}
	}
}
