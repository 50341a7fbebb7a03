package sequences

import (
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Load is a worker rank's current load and, from Potential, what a
// candidate request would add to it.
type Load struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// ActiveRequests is the number of running requests.
	ActiveRequests int
	// ActivePrefillTokens is the number of prompt tokens still to prefill.
	ActivePrefillTokens int
	// ITLExposure is Σ 1/(expected output tokens − 1) over the running
	// requests with an expected output of at least 2: how many seconds a
	// one-second stall of the engine adds to their mean inter-token times
	// together. Short answers weigh most.
	ITLExposure float64
	// ActiveBlocks is the number of KV blocks held by running requests,
	// shared blocks counted once (fractional with expected-output decay).
	ActiveBlocks float64
	// NewBlocks is the number of the candidate's blocks the worker does not
	// hold yet: all blocks from its first missing one on (0 outside
	// Potential).
	NewBlocks int
}

// PotentialDecodeBlocks is ActiveBlocks plus the candidate's NewBlocks.
func (l Load) PotentialDecodeBlocks() float64 { return l.ActiveBlocks + float64(l.NewBlocks) }

// PotentialPrefillTokens is ActivePrefillTokens plus the candidate's own
// prefill: inputTokens minus overlapBlocks cached blocks of blockSize
// tokens, at least 0.
func (l Load) PotentialPrefillTokens(inputTokens, overlapBlocks, blockSize int) int {
	return l.ActivePrefillTokens + max(inputTokens-overlapBlocks*blockSize, 0)
}

// PrefillSince returns when the worker rank's engine started on the
// prefill still booked there, as far as the ledger knows: the booking
// that found none pending, or the last timed completion
// (MarkPrefillCompletedAt, FreeAt) that left some. Engines compute their
// queue in order, so the time since then went into it; a time model can
// credit it (the kv-time policy). Zero when none is pending, the time is
// unknown or the rank is. It is not part of Load: it is this ledger's
// own observation (a replica applies the same bookings at other times).
func (t *Ledger) PrefillSince(w kvevent.WorkerRank) time.Time {
	slot, ok := t.bySlot[w]
	if !ok {
		return time.Time{}
	}
	return t.since(slot)
}

// PrefillSinceAt is PrefillSince of the i-th worker rank in Workers
// order (the order of PotentialView's loads); zero out of range.
func (t *Ledger) PrefillSinceAt(i int) time.Time {
	if i < 0 || i >= len(t.order) {
		return time.Time{}
	}
	return t.since(t.order[i])
}

func (t *Ledger) since(slot int) time.Time {
	if w := t.slots[slot]; w.prefill > 0 {
		return w.since
	}
	return time.Time{}
}

// Load returns the worker rank's current load.
func (t *Ledger) Load(w kvevent.WorkerRank) (Load, bool) {
	slot, ok := t.bySlot[w]
	if !ok {
		return Load{Worker: w}, false
	}
	return t.load(slot), true
}

func (t *Ledger) load(slot int) Load {
	t.refresh(slot)
	return t.cache[t.pos[slot]]
}

// refreshAll recomputes every stale cached load.
func (t *Ledger) refreshAll() {
	for _, s := range t.dirty {
		if t.slots[s] != nil {
			t.refresh(s)
		}
	}
	t.dirty = t.dirty[:0]
}

// refresh recomputes the live slot's cached load if it changed.
func (t *Ledger) refresh(slot int) {
	if t.fresh[slot] {
		return
	}
	w := t.slots[slot]
	l := Load{
		Worker:              w.id,
		ActiveRequests:      w.requests,
		ActivePrefillTokens: w.prefill,
		ActiveBlocks:        t.activeBlocks(w),
	}
	l.ITLExposure = float64(w.exposure) / exposureUnit
	t.cache[t.pos[slot]] = l
	t.fresh[slot] = true
}

func (t *Ledger) activeBlocks(w *rank) float64 {
	stride := t.cfg.ActiveSequenceStride
	n := float64(stride*w.active.blocks + w.private)
	if len(w.fracReqs) == 0 {
		return n
	}
	for r := range w.fracReqs {
		single := r.private + r.output
		if r.end != nil {
			single += stride * w.active.singles(r.end)
		}
		n += (r.frac - 1) * float64(single)
	}
	return n
}

// Potential appends to dst[:0] the load of every known worker rank (in
// Workers order) with NewBlocks set for a candidate request with the given
// prompt block sequence hashes and reuse override. Only the workers whose
// running requests start with the candidate's first block can hold any of
// it; each of them finds its first missing block by one walk down its trie
// of running requests.
func (t *Ledger) Potential(hashes []uint64, reuse Reuse, dst []Load) []Load {
	loads, newBlocks, sharers := t.PotentialView(hashes, reuse, t.sharers)
	t.sharers = sharers
	dst = slices.Grow(dst[:0], len(loads))[:len(loads)]
	for i := range loads {
		// Copied memory to memory: a Load returned in registers and
		// stored again costs a store-forwarding stall per worker.
		d := &dst[i]
		*d = loads[i]
		d.NewBlocks = newBlocks
	}
	for _, s := range sharers {
		dst[s.Pos].NewBlocks = s.NewBlocks
	}
	return dst
}

// Sharer is a worker rank whose running requests hold some of a
// candidate request's leading blocks (PotentialView).
type Sharer struct {
	// Pos is the worker rank's index in Workers order.
	Pos int
	// NewBlocks is the number of the candidate's blocks the worker rank
	// does not hold yet.
	NewBlocks int
}

// PotentialView is Potential without a copy of every load: loads is the
// ledger's own slice of every known worker rank's load, in Workers order,
// with NewBlocks 0 (read it, do not change or keep it: it is valid until
// the ledger next changes). A candidate request with the given prompt
// block sequence hashes and reuse override would add newBlocks blocks to
// every worker rank except those in sharers (appended to sharers[:0]),
// which hold some of its leading blocks and would add their NewBlocks.
// Route at a thousand workers reads the loads once this way instead of
// copying them first.
func (t *Ledger) PotentialView(hashes []uint64, reuse Reuse, sharers []Sharer) (loads []Load, newBlocks int, _ []Sharer) {
	t.refreshAll()
	sharers = sharers[:0]
	stride := t.cfg.ActiveSequenceStride
	n := len(hashes) / stride
	if !t.cfg.TrackActiveBlocks || n == 0 {
		return t.cache, 0, sharers
	}
	if !t.reuse(reuse) {
		return t.cache, n * stride, sharers
	}
	cand := t.tracking(hashes, n)
	for _, s := range t.roots[cand[0]] {
		sharers = append(sharers, Sharer{Pos: t.pos[s], NewBlocks: (n - t.slots[s].active.held(cand)) * stride})
	}
	return t.cache, n * stride, sharers
}
