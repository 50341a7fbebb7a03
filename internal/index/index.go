package index

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Sentinel errors returned by Apply; each is also counted in Stats.
var (
	// ErrUnknownParent: a stored event's parent hash is not held by the
	// emitting worker rank. The event is refused; nothing changes.
	ErrUnknownParent = errors.New("stored event: unknown parent block")
	// ErrUnknownBlock: a removed event named a hash the worker rank does
	// not hold. The rest of the batch is applied.
	ErrUnknownBlock = errors.New("removed event: unknown block")
	// ErrConflict: a stored block reused an engine hash for a different
	// position, or a position under a different engine hash. The blocks
	// before it are applied, the rest are refused.
	ErrConflict = errors.New("stored event: engine hash conflicts with the index")
	// ErrInvalid: the event is malformed (unknown kind or tier, too many
	// blocks, a block naming its parent). Nothing changes.
	ErrInvalid = errors.New("invalid event")
	// ErrTooManyWorkers: the index already tracks MaxHolders worker ranks.
	ErrTooManyWorkers = errors.New("too many worker ranks")
)

// MaxHolders bounds the number of worker ranks (plus predict-on-route
// shadows) one Index tracks.
const MaxHolders = 1<<15 - 2

type holderKind uint8

const (
	kindExact holderKind = iota
	kindApprox
	kindPredict
)

// holder is one worker rank as the tree sees it: exact (fed by events),
// approximate (fed by Record) or the predict-on-route shadow of a worker.
//
// It holds what a query reads for each score, in 32 bytes (two holders a
// cache line; a query over a prompt a whole fleet shares reads every
// holder); the rest is in holderTabs.
type holder struct {
	worker kvevent.WorkerRank
	kind   holderKind
	live   bool
	twin   bool // another holder has the same worker rank (exact/approx/predict)
	blocks int  // nodes this holder holds (any tier)
}

// holderTabs is the part of a holder that applying events reads:
// Index.tabs[id] for holder id.
type holderTabs struct {
	engine  [kvevent.NumTiers]*engineTable // engine hash -> node, per tier
	entries int                            // engine entries (all tiers)
	expiry  *expiryTable                   // approx/predict: node -> expiry (unix ns)
}

type holderKey struct {
	w    kvevent.WorkerRank
	kind holderKind
}

// Index is the single-threaded prefix index: exact workers fed by events,
// approximate workers fed by the router's own decisions, and
// predict-on-route shadows, in one tree. It is not safe for concurrent
// use; package liveindex wraps it for that. It does no I/O and reads no clock.
type Index struct {
	cfg      Config
	ns       *nodes
	kids     childTable
	holders  []holder     // index = holder id; 0 unused
	tabs     []holderTabs // aligned with holders
	rare     bool         // some live holder has a twin or is a predict-on-route shadow (noteRare)
	byKey    map[holderKey]uint32
	freeIDs  []uint32
	byWorker map[kvevent.WorkerID][]uint32 // worker -> its holder ids
	reserved map[kvevent.WorkerRank]int    // worker rank -> device engine table floor (slots), see Reserve
	approx   approxState
	used     []uint32 // last-matched tick per node (only with MaxBytes)
	tick     uint32
	stats    counters
	cascade  [kvevent.NumTiers][]uint32 // scratch for dropSubtree: nodes whose engine entries go
	found    []uint64                   // scratch for deleteEngineEntries
	bits     []uint64                   // scratch for deleteEngineEntries
	stack    []uint32                   // scratch for dropSubtree
	order    []uint32                   // scratch for dropSubtree
	sink     uint32                     // keeps prefetch loads alive; meaningless
}

// prefetchRun is how many blocks of an event have their memory loaded
// ahead at a time (see engineTable.prefetch): enough misses in flight to
// overlap, few enough that the lines are still cached when used.
const prefetchRun = 32

// prefetchAhead is how many blocks ahead of the one being applied an
// event's memory is prefetched where real prefetch instructions exist
// (hasPrefetch): far enough for a cache miss to complete meanwhile.
const prefetchAhead = 16

// New returns an empty index.
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Index{
		cfg:      cfg,
		ns:       newNodes(),
		holders:  make([]holder, 1),
		tabs:     make([]holderTabs, 1),
		byKey:    map[holderKey]uint32{},
		byWorker: map[kvevent.WorkerID][]uint32{},
	}, nil
}

func (x *Index) holderID(w kvevent.WorkerRank, kind holderKind, create bool) (uint32, error) {
	if id, ok := x.byKey[holderKey{w, kind}]; ok {
		return id, nil
	}
	if !create {
		return 0, nil
	}
	var id uint32
	if k := len(x.freeIDs); k > 0 {
		id = x.freeIDs[k-1]
		x.freeIDs = x.freeIDs[:k-1]
	} else {
		if len(x.holders) > MaxHolders {
			return 0, ErrTooManyWorkers
		}
		id = uint32(len(x.holders))
		x.holders = append(x.holders, holder{})
		x.tabs = append(x.tabs, holderTabs{})
	}
	x.holders[id] = holder{worker: w, kind: kind, live: true}
	x.tabs[id] = holderTabs{}
	x.byKey[holderKey{w, kind}] = id
	x.byWorker[w.ID] = append(x.byWorker[w.ID], id)
	x.markTwins(w)
	x.noteRare()
	return id, nil
}

// noteRare sets rare: whether a query must look for holders whose scores
// need finishRare. Holders come and go rarely; this scans them all.
func (x *Index) noteRare() {
	x.rare = false
	for i := range x.holders {
		if h := &x.holders[i]; h.live && (h.twin || h.kind == kindPredict) {
			x.rare = true
			return
		}
	}
}

// markTwins flags the holders of worker rank w when there is more than one
// (a query then merges their scores).
func (x *Index) markTwins(w kvevent.WorkerRank) {
	n := 0
	for _, id := range x.byWorker[w.ID] {
		if x.holders[id].worker == w {
			n++
		}
	}
	for _, id := range x.byWorker[w.ID] {
		if x.holders[id].worker == w {
			x.holders[id].twin = n > 1
		}
	}
}

// dropHolder removes every block of holder id and forgets it.
func (x *Index) dropHolder(id uint32) {
	x.clearHolder(id)
	h := &x.holders[id]
	delete(x.byKey, holderKey{h.worker, h.kind})
	ids := slices.DeleteFunc(x.byWorker[h.worker.ID], func(v uint32) bool { return v == id })
	if len(ids) == 0 {
		delete(x.byWorker, h.worker.ID)
	} else {
		x.byWorker[h.worker.ID] = ids
	}
	w := h.worker
	*h = holder{}
	x.tabs[id] = holderTabs{}
	x.freeIDs = append(x.freeIDs, id)
	x.markTwins(w)
	x.noteRare()
}

// clearHolder removes every block of holder id, keeping the holder.
func (x *Index) clearHolder(id uint32) {
	tb := &x.tabs[id]
	// Tops: held nodes whose parent the holder does not hold. Dropping
	// each top's subtree drops everything the holder holds.
	var tops []uint32
	visit := func(nid uint32) {
		p := x.ns.at(nid).parent
		if p == 0 {
			tops = append(tops, nid)
			return
		}
		if _, _, ok := x.ns.find(x.ns.at(p), id); !ok {
			tops = append(tops, nid)
		}
	}
	for t := range tb.engine {
		tb.engine[t].each(func(_ uint64, nid uint32, _ uint32) { visit(nid) })
	}
	if tb.expiry != nil {
		tb.expiry.each(func(nid uint32, _ int64) { visit(nid) })
	}
	slices.Sort(tops)
	tops = slices.Compact(tops)
	// The engine tables go wholesale: detach them so the cascades below
	// do not delete their entries one by one.
	tb.engine = [kvevent.NumTiers]*engineTable{}
	for _, nid := range tops {
		x.dropSubtree(id, nid, false)
	}
	tb.entries = 0
	tb.expiry = nil
}

// Apply folds one event into the index. Errors are the sentinels above,
// wrapped with context; a refused event leaves other workers untouched.
func (x *Index) Apply(ev *kvevent.Event) error {
	x.stats.events++
	if int(ev.Tier) >= kvevent.NumTiers {
		x.stats.invalid++
		return fmt.Errorf("%w: tier %d", ErrInvalid, ev.Tier)
	}
	var err error
	switch ev.Kind {
	case kvevent.Stored:
		err = x.store(ev)
	case kvevent.Removed:
		err = x.remove(ev)
	case kvevent.Cleared:
		if id, _ := x.holderID(ev.Worker, kindExact, false); id != 0 {
			x.dropHolder(id)
		}
	default:
		x.stats.invalid++
		return fmt.Errorf("%w: kind %d", ErrInvalid, ev.Kind)
	}
	if err == nil || errors.Is(err, ErrUnknownBlock) || errors.Is(err, ErrConflict) {
		x.enforceBudget()
	}
	return err
}

// RemoveWorker drops every rank of worker id (exact, approximate and
// predicted entries alike) and forgets their reservations (Reserve).
func (x *Index) RemoveWorker(id kvevent.WorkerID) {
	for _, hid := range slices.Clone(x.byWorker[id]) {
		x.dropHolder(hid)
	}
	x.dropReservations(id)
}

func (x *Index) store(ev *kvevent.Event) error {
	if len(ev.Blocks) > x.cfg.MaxBlocksPerEvent {
		x.stats.invalid++
		return fmt.Errorf("%w: %d blocks in one event (max %d)", ErrInvalid, len(ev.Blocks), x.cfg.MaxBlocksPerEvent)
	}
	if ev.HasParent {
		for _, b := range ev.Blocks {
			if b.EngineHash == ev.Parent {
				x.stats.invalid++
				return fmt.Errorf("%w: block %d names itself as parent", ErrInvalid, b.EngineHash)
			}
		}
	}
	if len(ev.Blocks) == 0 {
		return nil
	}
	id, err := x.holderID(ev.Worker, kindExact, !ev.HasParent)
	if err != nil {
		x.stats.invalid++
		return err
	}
	var parent uint32
	if ev.HasParent {
		var ok bool
		if id != 0 {
			parent, ok = x.lookupAnyTier(id, ev.Tier, ev.Parent)
		}
		if !ok {
			x.stats.unknownParent++
			return fmt.Errorf("%w: worker %v parent %d", ErrUnknownParent, ev.Worker, ev.Parent)
		}
	}
	h := &x.holders[id]
	tb := &x.tabs[id]
	m := tb.engine[ev.Tier]
	if m == nil {
		m = x.newEngineTable(ev.Worker, ev.Tier)
		tb.engine[ev.Tier] = m
	}
	bit := uint8(1) << ev.Tier
	if hasPrefetch {
		for _, b := range ev.Blocks[:min(prefetchAhead, len(ev.Blocks))] {
			m.prefetchSlot(b.EngineHash)
		}
	}
	for i, b := range ev.Blocks {
		if hasPrefetch {
			if j := i + prefetchAhead; j < len(ev.Blocks) {
				m.prefetchSlot(ev.Blocks[j].EngineHash)
			}
		} else if i%prefetchRun == 0 {
			x.sink += m.prefetchBlocks(ev.Blocks[i:min(i+prefetchRun, len(ev.Blocks))])
		}
		slot, present := m.reserve(b.EngineHash)
		if present {
			nid := m.slots[slot].node
			n := x.ns.at(nid)
			if n.parent != parent || n.local != b.LocalHash {
				x.stats.conflicts++
				return fmt.Errorf("%w: worker %v block %d (#%d of the event) already held elsewhere", ErrConflict, ev.Worker, b.EngineHash, i)
			}
			m.incr(b.EngineHash)
			x.stats.blockOps++
			x.stats.duplicateStores++
			parent = nid
			continue
		}
		nid := x.kids.find(x.ns, parent, b.LocalHash)
		if nid == 0 {
			// A new node (the usual case: a chain growing): no holder yet.
			var n *node
			nid, n = x.ns.alloc(parent, b.LocalHash)
			x.kids.link(x.ns, nid, n)
			x.growUsed(nid)
			n.h, n.n = entry(id, bit), 1
			if bit != deviceMask {
				n.lower++
			}
			h.blocks++
			m.fill(slot, b.EngineHash, nid)
			tb.entries++
			x.touch(nid)
			x.stats.blockOps++
			parent = nid
			continue
		}
		n := x.ns.at(nid)
		_, e, held := x.ns.find(n, id)
		if held && entryMask(e)&bit != 0 {
			// Held on this tier under another engine hash.
			x.stats.conflicts++
			return fmt.Errorf("%w: worker %v block %d (#%d of the event) duplicates a held block", ErrConflict, ev.Worker, b.EngineHash, i)
		}
		x.ns.setMask(n, id, entryMask(e)|bit)
		if !held {
			h.blocks++
		}
		m.fill(slot, b.EngineHash, nid)
		tb.entries++
		x.touch(nid)
		x.stats.blockOps++
		parent = nid
	}
	return nil
}

// lookupAnyTier resolves an engine hash of holder id, on tier t first and
// then on the other tiers (a lower-tier store may hang below a device block).
func (x *Index) lookupAnyTier(id uint32, t kvevent.Tier, hash uint64) (uint32, bool) {
	tb := &x.tabs[id]
	if nid := tb.engine[t].get(hash); nid != 0 {
		return nid, true
	}
	for o := range tb.engine {
		if nid := tb.engine[o].get(hash); nid != 0 {
			return nid, true
		}
	}
	return 0, false
}

func (x *Index) remove(ev *kvevent.Event) error {
	if len(ev.Removed) > x.cfg.MaxBlocksPerEvent {
		x.stats.invalid++
		return fmt.Errorf("%w: %d blocks in one event (max %d)", ErrInvalid, len(ev.Removed), x.cfg.MaxBlocksPerEvent)
	}
	id, _ := x.holderID(ev.Worker, kindExact, false)
	unknown := 0
	var first uint64
	var m *engineTable
	if id != 0 {
		m = x.tabs[id].engine[ev.Tier]
	}
	pf := m != nil && m.n > 0
	if pf && hasPrefetch {
		keys := ev.Removed[:min(prefetchAhead, len(ev.Removed))]
		for _, k := range keys {
			m.prefetchSlot(k)
		}
		for _, k := range keys[:min(prefetchAhead/2, len(keys))] {
			x.prefetchNode(m, k)
		}
	}
	for i, hash := range ev.Removed {
		if pf {
			if hasPrefetch {
				// Slots prefetchAhead blocks ahead; nodes half as far,
				// whose slots have arrived by then.
				if j := i + prefetchAhead; j < len(ev.Removed) {
					m.prefetchSlot(ev.Removed[j])
				}
				if j := i + prefetchAhead/2; j < len(ev.Removed) {
					x.prefetchNode(m, ev.Removed[j])
				}
			} else if i%prefetchRun == 0 {
				run := ev.Removed[i:min(i+prefetchRun, len(ev.Removed))]
				x.sink += m.prefetch(run)
				x.sink += x.prefetchNodes(m, run)
			}
		}
		nid, last := m.take(hash)
		if nid == 0 {
			if unknown == 0 {
				first = hash
			}
			unknown++
			continue
		}
		x.stats.blockOps++
		if !last {
			continue
		}
		x.tabs[id].entries--
		n := x.ns.at(nid)
		_, e, _ := x.ns.find(n, id)
		mask := entryMask(e) &^ (1 << ev.Tier)
		if mask != 0 {
			x.ns.setMask(n, id, mask)
			continue
		}
		// Last copy gone: the worker no longer holds this block, nor (by
		// prefix semantics) anything it holds below it.
		if n.first == 0 {
			// A leaf (the usual case: engines evict chains from their
			// tail): nothing below to drop. Exact holders have no expiry.
			x.ns.setMask(n, id, 0)
			x.holders[id].blocks--
			if n.n == 0 {
				x.freeNode(nid)
			}
			continue
		}
		x.ns.setMask(n, id, deviceMask) // engine entry already deleted
		x.dropSubtree(id, nid, true)
	}
	if unknown > 0 {
		x.stats.unknownRemoval += uint64(unknown)
		return fmt.Errorf("%w: worker %v: %d unknown hashes (first %d)", ErrUnknownBlock, ev.Worker, unknown, first)
	}
	return nil
}

// prefetchLimit bounds the blocks of one event that prefetch loads: more
// would not stay cached until they are applied.
const prefetchLimit = 4 * prefetchRun

// Prefetch loads the memory that applying ev will touch first (engine-hash
// slots, and for a removal the nodes) and returns a meaningless sum: the
// caller keeps it (adds it to a field) so the loads are not optimised
// away. It changes nothing and only reads, so it is safe next to
// concurrent readers; package liveindex calls it under the read lock just
// before Apply, to shorten its write lock holds. At most prefetchLimit
// blocks of ev are touched.
func (x *Index) Prefetch(ev *kvevent.Event) uint32 {
	if int(ev.Tier) >= kvevent.NumTiers {
		return 0
	}
	id, ok := x.byKey[holderKey{ev.Worker, kindExact}]
	if !ok {
		return 0
	}
	m := x.tabs[id].engine[ev.Tier]
	if m == nil || m.n == 0 {
		return 0
	}
	switch ev.Kind {
	case kvevent.Stored:
		return m.prefetchBlocks(ev.Blocks[:min(len(ev.Blocks), prefetchLimit)])
	case kvevent.Removed:
		keys := ev.Removed[:min(len(ev.Removed), prefetchLimit)]
		return m.prefetch(keys) + x.prefetchNodes(m, keys)
	}
	return 0
}

// prefetchNode starts loading the node k maps to, without waiting (see
// prefetchLines); k's slot should be cached already.
func (x *Index) prefetchNode(m *engineTable, k uint64) {
	if i, ok := m.slot(k); ok {
		prefetchLine(unsafe.Pointer(x.ns.at(m.slots[i].node)))
	}
}

// prefetchNodes loads the nodes the keys map to (a hint only: the
// removals that follow look them up again, in order).
func (x *Index) prefetchNodes(m *engineTable, keys []uint64) uint32 {
	var sum uint32
	for _, k := range keys {
		if i, ok := m.slot(k); ok {
			sum += uint32(x.ns.at(m.slots[i].node).n)
		}
	}
	return sum
}

// dropSubtree removes holder id from node top and from every node below it
// that it holds (all tiers, engine entries included), freeing nodes no
// holder is left on. Children are processed before parents.
//
// With topDone the top node's engine entries are already gone.
func (x *Index) dropSubtree(id uint32, top uint32, topDone bool) {
	stack := append(x.stack[:0], top)
	order := x.order[:0]
	for len(stack) > 0 {
		nid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		order = append(order, nid)
		for c := x.ns.at(nid).first; c != 0; c = x.ns.at(c).next {
			if _, _, ok := x.ns.find(x.ns.at(c), id); ok {
				stack = append(stack, c)
			}
		}
	}
	x.stack, x.order = stack[:0], order[:0]
	h := &x.holders[id]
	tb := &x.tabs[id]
	pending := false
	for i := len(order) - 1; i >= 0; i-- {
		nid := order[i]
		n := x.ns.at(nid)
		_, e, ok := x.ns.find(n, id)
		if !ok {
			continue
		}
		mask := entryMask(e)
		if topDone && nid == top {
			mask = 0
		}
		for t := range tb.engine {
			if mask&(1<<t) != 0 && tb.engine[t] != nil {
				x.cascade[t] = append(x.cascade[t], nid)
				pending = true
			}
		}
		if tb.expiry != nil && tb.expiry.del(nid) {
			x.approx.entries--
		}
		x.ns.setMask(n, id, 0)
		h.blocks--
		if n.n == 0 {
			x.freeNode(nid)
		}
	}
	if pending {
		for t := range x.cascade {
			if len(x.cascade[t]) > 0 {
				x.deleteEngineEntries(tb, t, x.cascade[t])
				x.cascade[t] = x.cascade[t][:0]
			}
		}
	}
}

// deleteEngineEntries removes holder h's tier-t engine entries for the
// given nodes (a cascade below a removed block). The table is keyed by
// engine hash, so finding a node's key takes one pass over its slots: a
// cascade costs O(table slots), not a map of the whole table per cascade,
// and storing the key on every entry would cost 8 bytes per (worker,
// block). Node ids are not reused meanwhile (nothing is allocated during a
// cascade), so deleting after the nodes are freed is the same.
func (x *Index) deleteEngineEntries(tb *holderTabs, t int, nids []uint32) {
	m := tb.engine[t]
	slices.Sort(nids)
	// Membership by a bitmap over the nodes' id range (a cascade's nodes
	// were mostly allocated together), or by binary search when the range
	// is too sparse for one.
	lo, span := nids[0], uint64(nids[len(nids)-1]-nids[0])+1
	var bits []uint64
	if span <= 1<<16 || span <= 64*uint64(len(nids)) {
		bits = x.bits[:0]
		for range (span + 63) / 64 {
			bits = append(bits, 0)
		}
		for _, nid := range nids {
			d := nid - lo
			bits[d>>6] |= 1 << (d & 63)
		}
		x.bits = bits
	}
	found := x.found[:0]
	for i := range m.slots {
		s := &m.slots[i]
		d := uint64(s.node - lo) // wraps for nodes below lo
		if s.node == 0 || d >= span {
			continue
		}
		if bits != nil {
			if bits[d>>6]&(1<<(d&63)) == 0 {
				continue
			}
		} else if _, ok := slices.BinarySearch(nids, s.node); !ok {
			continue
		}
		found = append(found, s.key())
		if len(found) == len(nids) {
			break // a node has one key per tier: all found
		}
	}
	for _, k := range found {
		m.del(k)
		tb.entries--
	}
	x.found = found[:0]
}

func (x *Index) freeNode(nid uint32) {
	x.kids.unlink(x.ns, nid)
	x.ns.release(nid)
}

// Indexed returns how many blocks worker rank w holds in the index (exact
// or approximate entries; any tier).
func (x *Index) Indexed(w kvevent.WorkerRank) int {
	n := 0
	for _, k := range []holderKind{kindExact, kindApprox} {
		if id, _ := x.holderID(w, k, false); id != 0 {
			n += x.holders[id].blocks
		}
	}
	return n
}
