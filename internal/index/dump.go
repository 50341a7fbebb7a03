package index

import (
	"cmp"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

type dumpEntry struct {
	depth int
	tier  kvevent.Tier
	hash  uint64
	node  uint32
	refs  uint32
}

// Dump returns the exact part of the index as stored events, one block
// each, worker ranks in (id, rank) order and each worker's blocks parents
// before children; a block stored n times appears n times. Applying them
// to an empty index rebuilds an identical one (same queries, same dump).
// Approximate and predicted entries are router-local guesses with a TTL
// and are not dumped.
func (x *Index) Dump() []kvevent.Event {
	var ids []uint32
	for id := range x.holders {
		if h := &x.holders[id]; h.live && h.kind == kindExact && x.tabs[id].entries > 0 {
			ids = append(ids, uint32(id))
		}
	}
	slices.SortFunc(ids, func(a, b uint32) int {
		wa, wb := x.holders[a].worker, x.holders[b].worker
		if c := cmp.Compare(wa.ID, wb.ID); c != 0 {
			return c
		}
		return cmp.Compare(wa.Rank, wb.Rank)
	})
	var out []kvevent.Event
	for _, id := range ids {
		h := &x.holders[id]
		tb := &x.tabs[id]
		var ents []dumpEntry
		rev := make(map[uint32][kvevent.NumTiers]uint64, tb.entries)
		has := make(map[uint32]uint8, tb.entries)
		for t := range tb.engine {
			tb.engine[t].each(func(hash uint64, nid uint32, refs uint32) {
				ents = append(ents, dumpEntry{depth: x.depth(nid), tier: kvevent.Tier(t), hash: hash, node: nid, refs: refs})
				r := rev[nid]
				r[t] = hash
				rev[nid] = r
				has[nid] |= 1 << t
			})
		}
		slices.SortFunc(ents, func(a, b dumpEntry) int {
			return cmp.Or(cmp.Compare(a.depth, b.depth), cmp.Compare(a.tier, b.tier), cmp.Compare(a.hash, b.hash))
		})
		for _, e := range ents {
			ev := kvevent.Event{Worker: h.worker, Tier: e.tier, Kind: kvevent.Stored,
				Blocks: []kvevent.Block{{EngineHash: e.hash, LocalHash: x.ns.at(e.node).local}}}
			if p := x.ns.at(e.node).parent; p != 0 {
				ev.HasParent = true
				mask := has[p]
				t := int(e.tier)
				if mask&(1<<t) == 0 {
					t = fastest(mask)
				}
				ev.Parent = rev[p][t]
			}
			for range e.refs {
				out = append(out, ev)
			}
		}
	}
	return out
}

func (x *Index) depth(nid uint32) int {
	d := 0
	for nid != 0 {
		d++
		nid = x.ns.at(nid).parent
	}
	return d
}
