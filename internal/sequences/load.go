package sequences

import "github.com/kvrouter/kvrouter/internal/kvevent"

// Load is a worker rank's current load and, from Potential, what a
// candidate request would add to it.
type Load struct {
	// Worker is the worker rank.
	Worker kvevent.Worker
	// ActiveRequests is the number of running requests.
	ActiveRequests int
	// ActivePrefillTokens is the number of prompt tokens still to prefill.
	ActivePrefillTokens int
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

// Load returns the worker rank's current load.
func (t *Tracker) Load(w kvevent.Worker) (Load, bool) {
	slot, ok := t.bySlot[w]
	if !ok {
		return Load{Worker: w}, false
	}
	return t.load(slot), true
}

func (t *Tracker) load(slot int) Load {
	w := t.slots[slot]
	return Load{
		Worker:              w.id,
		ActiveRequests:      w.requests,
		ActivePrefillTokens: w.prefill,
		ActiveBlocks:        t.activeBlocks(w),
	}
}

func (t *Tracker) activeBlocks(w *worker) float64 {
	stride := t.cfg.ActiveSequenceStride
	n := float64(stride*len(w.refs) + w.private)
	for r := range w.fracReqs {
		single := r.private + r.output
		for _, h := range r.tracked {
			if w.refs[h] == 1 {
				single += stride
			}
		}
		n += (r.frac - 1) * float64(single)
	}
	return n
}

// Potential appends to dst[:0] the load of every known worker rank (in
// Workers order) with NewBlocks set for a candidate request with the given
// prompt block sequence hashes and reuse override. It finds every worker's
// first missing block in one pass over the shared holders map.
func (t *Tracker) Potential(hashes []uint64, reuse Reuse, dst []Load) []Load {
	dst = dst[:0]
	stride := t.cfg.ActiveSequenceStride
	n := len(hashes) / stride
	for _, s := range t.order {
		dst = append(dst, t.load(s))
	}
	if !t.cfg.TrackActiveBlocks || n == 0 {
		return dst
	}
	if !t.reuse(reuse) {
		for i := range dst {
			dst[i].NewBlocks = n * stride
		}
		return dst
	}
	if cap(t.ks) < len(t.slots) {
		t.ks = make([]int32, len(t.slots))
	}
	ks := t.ks[:len(t.slots)]
	clear(ks)
	t.arena = t.arena[:0]
	set := t.alloc()
	any := false
	for _, s := range t.order {
		if len(t.slots[s].refs) > 0 {
			set.set(s)
			any = true
		}
	}
	if any {
		t.solve(hashes, stride, 0, n, set, ks)
	}
	for i, s := range t.order {
		dst[i].NewBlocks = (n - int(ks[s])) * stride
	}
	return dst
}

func (t *Tracker) alloc() bitset {
	w := t.hold.words
	if cap(t.arena)-len(t.arena) < w {
		t.arena = make([]uint64, 0, max(64, 2*cap(t.arena)))
	}
	b := t.arena[len(t.arena) : len(t.arena)+w]
	t.arena = t.arena[:len(t.arena)+w]
	clear(b)
	return bitset(b)
}

// solve sets ks[s] for every slot s in set, knowing that each holds between
// lo and hi leading tracked positions of hashes. Membership is monotone in
// the position (prefix-closed), so a probe at mid splits the set into the
// slots holding mid (more than mid leading) and the rest (at most mid).
func (t *Tracker) solve(hashes []uint64, stride, lo, hi int, set bitset, ks []int32) {
	for !set.empty() {
		if lo == hi {
			set.each(func(s int) { ks[s] = int32(lo) })
			return
		}
		mid := (lo + hi) / 2
		row := t.hold.row(hashes[(mid+1)*stride-1])
		if row == nil {
			hi = mid
			continue
		}
		in := t.alloc()
		nonEmpty := false
		for i := range set {
			in[i] = set[i] & row[i]
			set[i] &^= row[i]
			nonEmpty = nonEmpty || in[i] != 0
		}
		if nonEmpty {
			t.solve(hashes, stride, mid+1, hi, in, ks)
		}
		hi = mid
	}
}
