package index

import (
	"math/bits"
	"slices"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Score is one worker rank's overlap with a request. Its counts are
// int32 (40 bytes a score, not 64): a query over a prompt a whole fleet
// shares writes one per worker, and at 1,024 workers writing them was
// most of its cost.
type Score struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// Blocks is the number of consecutive leading request blocks the
	// worker holds on any tier.
	Blocks int32
	// Tiers splits Blocks by the fastest tier holding each block:
	// Tiers[kvevent.TierDevice] is the device overlap, the others the
	// host/disk/external blocks that extend it.
	Tiers [kvevent.NumTiers]int32
	// Indexed is the worker rank's total number of indexed blocks.
	Indexed int32
}

// Scores is a query result. Pass the same value back to later queries to
// reuse its storage: a warmed-up Scores makes Query allocation-free.
type Scores struct {
	// List has one Score per worker rank holding at least the first block,
	// in no particular order. Workers with no overlap are absent.
	List []Score

	act, nxt []active
	twins    []int32 // indices into List of scores whose worker rank has several holders
}

// Get returns worker rank w's score (zero Blocks when absent).
func (s *Scores) Get(w kvevent.WorkerRank) Score {
	for _, sc := range s.List {
		if sc.Worker == w {
			return sc
		}
	}
	return Score{Worker: w}
}

type active struct {
	e     uint32 // holder entry (id and tier mask)
	start int32  // depth where the current tier mask began
	tiers [kvevent.NumTiers]int32
}

// fastest returns the fastest tier in a mask.
func fastest(mask uint8) int { return bits.TrailingZeros8(mask) }

// Query scores every worker rank holding a prefix of the request whose
// local block hashes are given, into dst (reset first). Its cost is
// proportional to the matched depth plus the number of holder changes
// along the path; workers that do not match cost nothing.
func (x *Index) Query(local []uint64, dst *Scores) {
	dst.List = dst.List[:0]
	dst.twins = dst.twins[:0]
	x.queryAppend(local, dst)
	x.mergeTwins(dst, 0)
}

func (x *Index) queryAppend(local []uint64, dst *Scores) {
	var tick uint32
	if x.used != nil {
		tick = atomic.AddUint32(&x.tick, 1)
	}
	act := dst.act[:0]
	nxt := dst.nxt[:0]
	var single, single0 [1]uint32
	// lazy: the active holders are all of curNode's, none changed tier
	// since depth 0, so act is not built yet. A popular prefix (a system
	// prompt every worker holds) then costs nothing per holder until the
	// holders change, and while holders only leave (no tier change) it
	// stays lazy: each change costs a merge of two holder lists and a
	// score per leaver, not a copy of every active holder.
	lazy := false
	cur := uint32(0)
	curNode := x.ns.at(0)
	var curN, curLower uint16
	depth := 0
	for i, lh := range local {
		// The next block is usually the current node's first child.
		c := curNode.first
		var cn *node
		if c != 0 {
			cn = x.ns.at(c)
			if cn.local != lh {
				if cn.next == 0 {
					break
				}
				c = x.kids.find(x.ns, cur, lh)
				if c == 0 {
					break
				}
				cn = x.ns.at(c)
			}
		} else {
			break
		}
		switch {
		case i == 0:
			lazy = cn.n > 0
		case cn.n == curN && cn.lowerCount() == 0 && curLower == 0:
			// Same holders, all device-only: nothing changes.
		case lazy && cn.n > 0 && cn.lowerCount() == 0 && curLower == 0:
			// Some holders left, all device-only on both nodes. A holder
			// of a node holds its parent, so the child's holders are a
			// subset of the parent's: find the leavers by bisection, at a
			// cost that grows with their number, not with the fleet's.
			x.bisectLeavers(dst, x.ns.holders(curNode, &single0), x.ns.holders(cn, &single), i)
		default:
			hs := x.ns.holders(cn, &single)
			if lazy && len(hs) > 0 {
				if ps := x.ns.holders(curNode, &single0); subsetSameTiers(hs, ps) {
					// Holders only left, none changed tier: score the
					// leavers and keep the rest implicit.
					x.scoreLeavers(dst, ps, hs, i)
					break
				}
			}
			nxt = nxt[:0]
			j := 0
			if lazy {
				nxt = x.splitLazy(dst, x.ns.holders(curNode, &single0), hs, i, nxt)
				lazy = false
			} else {
				for _, a := range act {
					nxt = x.advance(dst, a, hs, &j, i, nxt)
				}
			}
			act, nxt = nxt, act
		}
		if len(act) == 0 && !lazy {
			break
		}
		if x.used != nil {
			atomic.StoreUint32(&x.used[c], tick)
		}
		cur, curNode, curN, curLower = c, cn, cn.n, cn.lowerCount()
		depth = i + 1
	}
	if lazy {
		x.finishLazy(dst, x.ns.holders(curNode, &single0), depth)
	}
	for _, a := range act {
		x.finish(dst, a, depth)
	}
	dst.act, dst.nxt = act[:0], nxt[:0]
}

// advance carries active holder a from a node to its child at depth i,
// whose sorted holder list is hs (j is the caller's cursor into it): a
// goes on to nxt when it holds the child, with its tier split updated
// when its tiers changed, and is scored at depth i otherwise.
func (x *Index) advance(dst *Scores, a active, hs []uint32, j *int, i int, nxt []active) []active {
	k := *j
	for k < len(hs) && entryID(hs[k]) < entryID(a.e) {
		k++ // holds the child but not the parent: not a prefix
	}
	*j = k
	if k < len(hs) && entryID(hs[k]) == entryID(a.e) {
		if hs[k] != a.e {
			a.tiers[fastest(entryMask(a.e))] += int32(i) - a.start
			a.start = int32(i)
			a.e = hs[k]
		}
		return append(nxt, a)
	}
	x.finish(dst, a, i)
	return nxt
}

// splitLazy is advance for every holder of a node whose holders are
// still implicit (all active since depth 0, on one tier each): ps is that
// node's sorted holder list, hs its child's at depth i. The holders of
// the child go on to nxt; the others are scored at depth i in one pass.
// A prompt every worker of a large fleet shares ends here with a score
// per worker, so this loop is what a query's cost grows with: it writes
// the scores through a local slice with room made up front, no call per
// score.
func (x *Index) splitLazy(dst *Scores, ps, hs []uint32, i int, nxt []active) []active {
	list := slices.Grow(dst.List, len(ps))
	holders := x.holders
	j := 0
	for _, e := range ps {
		id := entryID(e)
		for j < len(hs) && entryID(hs[j]) < id {
			j++ // holds the child but not the parent: not a prefix
		}
		if j < len(hs) && entryID(hs[j]) == id {
			a := active{e: e}
			if hs[j] != e {
				a.tiers[fastest(entryMask(e))] = int32(i)
				a.start = int32(i)
				a.e = hs[j]
			}
			nxt = append(nxt, a)
			continue
		}
		n := len(list)
		list = list[:n+1]
		h := &holders[id]
		putFirst(&list[n], h, e, i)
		if h.twin || h.kind == kindPredict {
			dst.List = list
			x.finishRare(dst, h, n)
		}
	}
	dst.List = list
	return nxt
}

// subsetSameTiers reports whether every entry of hs (a child's sorted
// holder list) is in ps (its parent's), tier mask included: the child's
// holders are then the parent's minus some, none changed tier.
func subsetSameTiers(hs, ps []uint32) bool {
	if len(hs) > len(ps) {
		return false
	}
	j := 0
	for _, e := range hs {
		id := entryID(e)
		for j < len(ps) && entryID(ps[j]) < id {
			j++
		}
		if j == len(ps) || ps[j] != e {
			return false
		}
		j++
	}
	return true
}

// scoreLeavers scores, at depth i, the entries of ps (implicit holders,
// see splitLazy) that are not in hs, a subset of ps (nil: all of ps).
// The scores are written by a loop without calls (putLeavers); the rare
// holders (twins, predict-on-route shadows) are completed after, in a
// second walk, and only when the index has any.
func (x *Index) scoreLeavers(dst *Scores, ps, hs []uint32, i int) {
	n0 := len(dst.List)
	dst.List = putLeavers(slices.Grow(dst.List, len(ps)-len(hs)), x.holders, ps, hs, i)
	if !x.rare {
		return
	}
	n, j := n0, 0
	for _, e := range ps {
		if j < len(hs) && hs[j] == e {
			j++
			continue
		}
		if h := &x.holders[entryID(e)]; h.twin || h.kind == kindPredict {
			x.finishRare(dst, h, n)
		}
		n++
	}
}

// putLeavers appends to list (with room for them) the scores at depth i
// of the entries of ps not in hs: scoreLeavers' loop, the one a query
// over a prompt a whole fleet shares spends its time in.
func putLeavers(list []Score, holders []holder, ps, hs []uint32, i int) []Score {
	if len(hs) == 0 {
		// Every entry leaves (the end of the match): no merge.
		n := len(list)
		list = list[:n+len(ps)]
		out := list[n:][:len(ps)]
		for k, e := range ps {
			putFirst(&out[k], &holders[entryID(e)], e, i)
		}
		return list
	}
	j := 0
	for _, e := range ps {
		if j < len(hs) && hs[j] == e {
			j++
			continue
		}
		n := len(list)
		list = list[:n+1]
		putFirst(&list[n], &holders[entryID(e)], e, i)
	}
	return list
}

// bisectRun is the list length below which bisectLeavers merges instead
// of splitting further: a short merge costs less than binary searches.
const bisectRun = 16

// bisectLeavers is scoreLeavers for entries that are all device-only (an
// entry is then equal in both lists exactly when its id is): it splits ps
// in halves and finds each half's share of hs by binary search; a part of
// ps as long as its share of hs has no leavers. Its cost grows with
// L log(len(ps)/L) for L leavers instead of len(ps).
func (x *Index) bisectLeavers(dst *Scores, ps, hs []uint32, i int) {
	for len(ps) > bisectRun && len(hs) < len(ps) {
		if len(hs) == 0 {
			break
		}
		m := len(ps) / 2
		id := entryID(ps[m])
		k, _ := slices.BinarySearchFunc(hs, id, func(e, id uint32) int { return cmpInt(entryID(e), id) })
		// Left half first (recursion), right half by the loop.
		x.bisectLeavers(dst, ps[:m], hs[:k], i)
		ps, hs = ps[m:], hs[k:]
	}
	if len(hs) < len(ps) {
		x.scoreLeavers(dst, ps, hs, i)
	}
}

// finishLazy scores every holder in ps (implicit, see splitLazy) at depth.
func (x *Index) finishLazy(dst *Scores, ps []uint32, depth int) {
	x.scoreLeavers(dst, ps, nil, depth)
}

// putFirst writes the score of holder h, active since depth 0 on the
// tiers of its entry e, ending at depth.
func putFirst(s *Score, h *holder, e uint32, depth int) {
	s.Worker, s.Blocks, s.Indexed = h.worker, int32(depth), int32(h.blocks)
	s.Tiers = [kvevent.NumTiers]int32{}
	s.Tiers[fastest(entryMask(e))&(kvevent.NumTiers-1)] = int32(depth)
}

// finishRare completes score n of a holder that has twins or is a
// predict-on-route shadow.
func (x *Index) finishRare(dst *Scores, h *holder, n int) {
	dst.List[n].Indexed = int32(x.Indexed(h.worker)) // predicted blocks are not indexed
	if h.twin {
		dst.twins = append(dst.twins, int32(n))
	}
}

func (x *Index) finish(dst *Scores, a active, depth int) {
	h := &x.holders[entryID(a.e)]
	// Filled in place: a query over a popular prefix finishes a score
	// for every worker holding it.
	n := len(dst.List)
	if n < cap(dst.List) {
		dst.List = dst.List[:n+1]
	} else {
		dst.List = append(dst.List, Score{})
	}
	s := &dst.List[n]
	s.Worker, s.Blocks, s.Indexed = h.worker, int32(depth), int32(h.blocks)
	s.Tiers = a.tiers
	s.Tiers[fastest(entryMask(a.e))] += int32(depth) - a.start
	if h.twin || h.kind == kindPredict {
		x.finishRare(dst, h, n)
	}
}

// mergeTwins keeps one score per worker rank when it has several holders
// (exact or approximate entries plus predict-on-route ones): the one with
// the most blocks. dst.twins lists the scores (from index from on) whose
// worker rank has several holders, in List order.
func (x *Index) mergeTwins(dst *Scores, from int) {
	if len(dst.twins) == 0 {
		return
	}
	for a, i := range dst.twins {
		if dst.List[i].Blocks < 0 {
			continue // merged into an earlier one
		}
		for _, j := range dst.twins[a+1:] {
			if dst.List[j].Blocks >= 0 && dst.List[j].Worker == dst.List[i].Worker {
				if dst.List[j].Blocks > dst.List[i].Blocks {
					dst.List[i] = dst.List[j]
				}
				dst.List[j].Blocks = -1 // drop below
			}
		}
	}
	out := dst.List[:from]
	for _, s := range dst.List[from:] {
		if s.Blocks >= 0 {
			out = append(out, s)
		}
	}
	dst.List = out
	dst.twins = dst.twins[:0]
}
