package sequences

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Sentinel errors of AddRequest.
var (
	// ErrUnknownWorker means the request names a worker rank that was never
	// added (or was removed).
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrDuplicateRequest means a request with the same id is running.
	ErrDuplicateRequest = errors.New("duplicate request id")
)

// Reuse is a per-request override of Config.AssumeKVReuse.
type Reuse uint8

// Reuse values.
const (
	// ReuseDefault follows Config.AssumeKVReuse.
	ReuseDefault Reuse = iota
	// ReuseOn shares the request's blocks with other running requests.
	ReuseOn
	// ReuseOff makes the request's blocks private.
	ReuseOff
)

// Request is one routed request being booked on a worker rank.
type Request struct {
	// ID identifies the request; unique among running requests.
	ID string
	// Worker is the worker rank the request runs on.
	Worker kvevent.WorkerRank
	// BlockHashes are the sequence hashes of the prompt's full blocks
	// (kvhash): equal hashes at a position mean equal prefixes, which
	// Potential relies on. The ledger copies what it keeps.
	BlockHashes []uint64
	// PrefillTokens is the number of prompt tokens the worker still has to
	// compute: input tokens minus cached overlap blocks × block size.
	PrefillTokens int
	// ExpectedOutputTokens is the expected output length; 0 means unknown.
	ExpectedOutputTokens int
	// Reuse overrides Config.AssumeKVReuse for this request.
	Reuse Reuse
}

// Stats counts the ledger's unusual events since it was created.
type Stats struct {
	// UnknownIDs counts MarkPrefillCompleted, Free and SetGenerated calls for
	// request ids that are not running.
	UnknownIDs uint64
	// Expired counts requests freed by the expiry sweep.
	Expired uint64
}

type request struct {
	id          string
	slot        int
	end         *tnode // where the tracked hashes end in the worker's trie (nil when private)
	private     int    // private prompt blocks (reuse off)
	output      int    // output blocks (TrackOutputBlocks)
	prefill     int
	prefillDone bool
	expected    int
	frac        float64 // weight of single-reference blocks, 1 = full
	started     time.Time
}

// exposureUnit is the fixed point of rank.exposure: 1e12 units a second.
const exposureUnit = 1e12

// exposure is how much a stall of one second raises the request's mean
// inter-token time, in seconds: 1/(expected output − 1), in exposureUnit;
// 0 when the expected output is unknown or a single token.
func (r *request) exposure() int64 {
	if r.expected < 2 {
		return 0
	}
	return int64(math.Round(exposureUnit / float64(r.expected-1)))
}

// rank is one worker rank's running requests: the trie of their tracked
// hashes and their counts.
type rank struct {
	id       kvevent.WorkerRank
	active   trie // tracked hashes of running requests
	requests int
	prefill  int
	// since is when the rank's booked prefill last started a stretch of
	// progress: the booking that found none pending, or the last
	// completion that left some pending (zero: unknown, see Load).
	since time.Time
	// exposure is Σ 1/(expected output − 1) over its running requests
	// with an expected output of 2 tokens or more (Load.ITLExposure), in
	// exposureUnit fixed point: integer sums do not depend on the order
	// requests come and go in, so replicas agree and an idle rank is 0.
	exposure int64
	private  int // private + output blocks of its requests
	fracReqs map[*request]struct{}
}

// Ledger is the active sequences: the running requests (bookings) of every
// worker rank. The zero value is not usable; call New.
type Ledger struct {
	cfg    Config
	slots  []*rank // index = slot; nil = free
	bySlot map[kvevent.WorkerRank]int
	order  []int // live slots, sorted by worker
	pos    []int // slot -> its index in order (-1 for a free slot)
	// roots maps the first tracking hash of each worker trie's top edges
	// to the slots holding such an edge: the only workers that can hold
	// any leading block of a candidate are those listed under its first
	// hash, so Potential walks their tries alone.
	roots map[uint64][]int
	// cache holds each live rank's load (without NewBlocks) in Workers
	// order (cache[pos[slot]]), recomputed when its slot's fresh is
	// false; dirty lists the slots marked so since the last refreshAll.
	// Potential copies the loads from one dense slice, and PotentialView
	// hands it out, instead of chasing a pointer per worker.
	cache     []Load
	fresh     []bool
	dirty     []int
	reqs      map[string]*request
	nextSweep time.Time
	stats     Stats

	cand    []uint64  // scratch: the tracking hashes when the stride is over 1
	sharers []Sharer  // scratch of Potential
	chunks  chunkPool // recycled copies of tracking hashes, shared by the tries
}

// tracking returns the n tracking hashes of a prompt's block hashes: the
// hashes themselves with stride 1 (no copy), else every stride-th one in a
// scratch slice that is valid until the next call.
func (t *Ledger) tracking(hashes []uint64, n int) []uint64 {
	stride := t.cfg.ActiveSequenceStride
	if stride == 1 {
		return hashes[:n]
	}
	cand := t.cand[:0]
	for i := range n {
		cand = append(cand, hashes[(i+1)*stride-1])
	}
	t.cand = cand
	return cand
}

// New returns an empty ledger.
func New(cfg Config) (*Ledger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Ledger{
		cfg:    cfg,
		bySlot: make(map[kvevent.WorkerRank]int),
		roots:  make(map[uint64][]int),
		reqs:   make(map[string]*request),
	}, nil
}

// Config returns the ledger's configuration.
func (t *Ledger) Config() Config { return t.cfg }

// Stats returns the counters.
func (t *Ledger) Stats() Stats { return t.stats }

// AddRank makes a worker rank known; adding a known one does nothing.
func (t *Ledger) AddRank(w kvevent.WorkerRank) {
	if _, ok := t.bySlot[w]; ok {
		return
	}
	slot := slices.Index(t.slots, nil)
	if slot < 0 {
		slot = len(t.slots)
		t.slots = append(t.slots, nil)
		t.fresh = append(t.fresh, false)
	}
	t.slots[slot] = &rank{id: w, active: trie{chunks: &t.chunks}}
	t.bySlot[w] = slot
	i, _ := slices.BinarySearchFunc(t.order, w, func(s int, w kvevent.WorkerRank) int { return compareRanks(t.slots[s].id, w) })
	t.order = slices.Insert(t.order, i, slot)
	t.reindex()
}

// reindex rebuilds pos from order, and the load cache (every live
// slot's load is recomputed at the next refreshAll).
func (t *Ledger) reindex() {
	t.pos = slices.Grow(t.pos[:0], len(t.slots))[:len(t.slots)]
	for s := range t.pos {
		t.pos[s] = -1
	}
	t.cache = slices.Grow(t.cache[:0], len(t.order))[:len(t.order)]
	// Every live slot is stale now: dirty lists each once (appending to
	// the old list grew it by the whole fleet per AddRank, quadratically
	// while a fleet registers before its first Route).
	t.dirty = t.dirty[:0]
	for i, s := range t.order {
		t.pos[s] = i
		t.fresh[s] = false
		t.dirty = append(t.dirty, s)
	}
}

// stale marks the slot's cached load as out of date. A slot refreshed
// alone (Load) stays listed in dirty and may be listed again: without
// Potential calls to empty it, the list is rebuilt once it is twice as
// long as there are slots.
func (t *Ledger) stale(slot int) {
	if !t.fresh[slot] {
		return
	}
	t.fresh[slot] = false
	t.dirty = append(t.dirty, slot)
	if len(t.dirty) > 2*len(t.slots) {
		t.dirty = t.dirty[:0]
		for s, ok := range t.fresh {
			if !ok && t.slots[s] != nil {
				t.dirty = append(t.dirty, s)
			}
		}
	}
}

// RemoveRank frees every request of the worker rank and forgets it. It
// returns the ids of the requests it freed, sorted.
func (t *Ledger) RemoveRank(w kvevent.WorkerRank) []string {
	slot, ok := t.bySlot[w]
	if !ok {
		return nil
	}
	var ids []string
	for id, r := range t.reqs {
		if r.slot == slot {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		t.free(t.reqs[id], time.Time{})
	}
	t.slots[slot] = nil
	delete(t.bySlot, w)
	t.order = slices.DeleteFunc(t.order, func(s int) bool { return s == slot })
	t.reindex()
	return ids
}

// Workers returns the known worker ranks, sorted; Potential reports them in
// this order.
func (t *Ledger) Workers() []kvevent.WorkerRank {
	out := make([]kvevent.WorkerRank, len(t.order))
	for i, s := range t.order {
		out[i] = t.slots[s].id
	}
	return out
}

// Has reports whether the request is running.
func (t *Ledger) Has(id string) bool { _, ok := t.reqs[id]; return ok }

// WorkerOf returns the worker rank a running request is booked on.
func (t *Ledger) WorkerOf(id string) (kvevent.WorkerRank, bool) {
	r, ok := t.reqs[id]
	if !ok {
		return kvevent.WorkerRank{}, false
	}
	return t.slots[r.slot].id, true
}

// Len returns the number of running requests.
func (t *Ledger) Len() int { return len(t.reqs) }

func (t *Ledger) reuse(o Reuse) bool {
	switch o {
	case ReuseOn:
		return true
	case ReuseOff:
		return false
	}
	return t.cfg.AssumeKVReuse
}

// AddRequest books a request on its worker rank at time now. It first runs
// the lazy expiry sweep. Errors: ErrUnknownWorker, ErrDuplicateRequest.
func (t *Ledger) AddRequest(req Request, now time.Time) error {
	t.Expire(now)
	slot, ok := t.bySlot[req.Worker]
	if !ok {
		return fmt.Errorf("adding request %q on %v: %w", req.ID, req.Worker, ErrUnknownWorker)
	}
	if _, dup := t.reqs[req.ID]; dup {
		return fmt.Errorf("adding request %q: %w", req.ID, ErrDuplicateRequest)
	}
	w := t.slots[slot]
	r := &request{id: req.ID, slot: slot, expected: max(req.ExpectedOutputTokens, 0), frac: 1, started: now}
	if t.cfg.TrackPrefillTokens {
		r.prefill = max(req.PrefillTokens, 0)
	}
	if t.cfg.TrackActiveBlocks {
		stride := t.cfg.ActiveSequenceStride
		n := len(req.BlockHashes) / stride
		if t.reuse(req.Reuse) {
			h := t.tracking(req.BlockHashes, n)
			if n > 0 && w.active.root.child(h[0]) == nil {
				t.roots[h[0]] = append(t.roots[h[0]], slot)
			}
			r.end = w.active.add(h)
		} else {
			r.private = n * stride
			w.private += r.private
		}
	}
	w.requests++
	w.exposure += r.exposure()
	if w.prefill == 0 && r.prefill > 0 {
		w.since = now
	}
	w.prefill += r.prefill
	t.stale(slot)
	t.reqs[req.ID] = r
	return nil
}

// MarkPrefillCompleted is MarkPrefillCompletedAt at an unknown time: the
// rank's remaining prefill gets no progress start (PrefillSince)
// until it next drains.
func (t *Ledger) MarkPrefillCompleted(id string) bool {
	return t.MarkPrefillCompletedAt(id, time.Time{})
}

// MarkPrefillCompletedAt removes the request's prefill tokens from its
// worker's load (its blocks stay) at time now, which starts the next
// stretch of progress on the prefill still booked there
// (PrefillSince). It returns false, and counts, when the id is not
// running; marking twice is harmless.
func (t *Ledger) MarkPrefillCompletedAt(id string, now time.Time) bool {
	r, ok := t.reqs[id]
	if !ok {
		t.stats.UnknownIDs++
		return false
	}
	t.completePrefill(r, now)
	return true
}

func (t *Ledger) completePrefill(r *request, now time.Time) {
	if r.prefillDone {
		return
	}
	r.prefillDone = true
	w := t.slots[r.slot]
	w.prefill -= r.prefill
	if r.prefill > 0 {
		// The engine has moved past this prompt: progress on what is
		// still booked counts from now (an engine computes its queue
		// in order, so work it did on the others before now is not
		// credited: the estimate errs toward a longer queue).
		w.since = now
	}
	t.stale(r.slot)
}

// Free is FreeAt at an unknown time (see MarkPrefillCompleted).
func (t *Ledger) Free(id string) bool { return t.FreeAt(id, time.Time{}) }

// FreeAt ends a request at time now: its prefill (if still pending, as in
// MarkPrefillCompletedAt) and its blocks leave the load. It returns false,
// and counts, when the id is not running, so a second Free is harmless.
func (t *Ledger) FreeAt(id string, now time.Time) bool {
	r, ok := t.reqs[id]
	if !ok {
		t.stats.UnknownIDs++
		return false
	}
	t.free(r, now)
	return true
}

func (t *Ledger) free(r *request, now time.Time) {
	t.completePrefill(r, now)
	w := t.slots[r.slot]
	if r.end != nil {
		if top := w.active.top(r.end); top != nil {
			first := top.hashes[0]
			w.active.remove(r.end)
			if w.active.root.child(first) == nil {
				t.unroot(first, r.slot)
			}
		}
		r.end = nil
	}
	w.private -= r.private + r.output
	w.requests--
	w.exposure -= r.exposure()
	t.stale(r.slot)
	delete(w.fracReqs, r)
	delete(t.reqs, r.id)
}

// unroot removes slot from the workers listed under first hash h.
func (t *Ledger) unroot(h uint64, slot int) {
	slots := t.roots[h]
	if i := slices.Index(slots, slot); i >= 0 {
		slots[i] = slots[len(slots)-1]
		slots = slots[:len(slots)-1]
	}
	if len(slots) == 0 {
		delete(t.roots, h)
	} else {
		t.roots[h] = slots
	}
}

// SetGenerated reports that the request has generated tokens output tokens
// so far. With TrackOutputBlocks, every BlockSize tokens add one private
// decode block, and with expected output tokens the request's
// single-reference blocks count at 1 − generated/expected (at least 0).
// Without TrackOutputBlocks it only checks the id. It returns false, and
// counts, when the id is not running.
func (t *Ledger) SetGenerated(id string, tokens int) bool {
	r, ok := t.reqs[id]
	if !ok {
		t.stats.UnknownIDs++
		return false
	}
	if !t.cfg.TrackOutputBlocks || !t.cfg.TrackActiveBlocks {
		return true
	}
	tokens = max(tokens, 0)
	w := t.slots[r.slot]
	out := tokens / t.cfg.BlockSize
	w.private += out - r.output
	t.stale(r.slot)
	r.output = out
	if r.expected > 0 {
		r.frac = max(0, 1-float64(tokens)/float64(r.expected))
		if r.frac < 1 {
			if w.fracReqs == nil {
				w.fracReqs = make(map[*request]struct{})
			}
			w.fracReqs[r] = struct{}{}
		} else {
			delete(w.fracReqs, r)
		}
	}
	return true
}

// Expire frees every request started at least Expiry before now, if the
// lazy sweep is due (at most every ExpirySweep), and returns their ids,
// sorted. With Expiry 0 it does nothing.
func (t *Ledger) Expire(now time.Time) []string {
	if t.cfg.Expiry <= 0 || now.Before(t.nextSweep) {
		return nil
	}
	t.nextSweep = now.Add(t.cfg.ExpirySweep)
	var ids []string
	for id, r := range t.reqs {
		if !now.Before(r.started.Add(t.cfg.Expiry)) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		t.free(t.reqs[id], now)
		t.stats.Expired++
	}
	return ids
}

func compareRanks(a, b kvevent.WorkerRank) int {
	if a.ID != b.ID {
		if a.ID < b.ID {
			return -1
		}
		return 1
	}
	if a.Rank != b.Rank {
		if a.Rank < b.Rank {
			return -1
		}
		return 1
	}
	return 0
}
