package timeline

import (
	"slices"
	"time"
)

// Fleet is one slot's fleet-wide figures.
type Fleet struct {
	// Requests is how many completion requests finished in the slot.
	Requests int
	// Errors is how many of them failed on the router's or a worker's
	// side (5xx, or no status at all).
	Errors int
	// TTFTs is how many first tokens were seen in the slot; TTFTP50 and
	// TTFTP99 are their quantiles (0 when TTFTs is 0).
	TTFTs            int
	TTFTP50, TTFTP99 time.Duration
}

// Gauge is one worker's load as read at an instant.
type Gauge struct {
	// ID identifies the worker; Name is what to call it.
	ID   uint64
	Name string
	// InFlight is the requests running on it (all ranks).
	InFlight int
	// PrefillTokens is the prompt tokens it still has to prefill.
	PrefillTokens int
	// ActiveBlocks is the KV blocks held by its running requests.
	ActiveBlocks float64
	// UsedBlocks is the KV blocks it reported holding (cached included);
	// CapacityBlocks is its KV capacity (0 when unknown).
	UsedBlocks, CapacityBlocks int
}

// Worker is one slot's figures for one worker: its last gauge reading in
// the slot and the requests it finished in the slot.
type Worker struct {
	Gauge
	// HasGauge says whether Gauge was read in the slot.
	HasGauge bool
	// Requests is how many requests it finished in the slot with usage;
	// PromptTokens, PredictedTokens and ActualTokens are their prompt
	// tokens, the router's predicted cached tokens and the cached tokens
	// the worker reported.
	Requests                                    int
	PromptTokens, PredictedTokens, ActualTokens int64
}

// Sample is one slot: fleet figures and one Worker per worker that had a
// gauge reading or a request in it, ordered by ID.
type Sample struct {
	Fleet   Fleet
	Workers []Worker
}

// Request is a finished request as the timeline counts it.
type Request struct {
	// Worker is the worker that served it (meaningful when Served).
	Worker uint64
	Served bool
	// Error says it failed on the router's or a worker's side.
	Error bool
	// HasUsage says the worker reported cached tokens; then
	// PromptTokens, PredictedTokens and ActualTokens are counted for it.
	HasUsage                                    bool
	PromptTokens, PredictedTokens, ActualTokens int
}

// Timeline is the history: a Ring of closed slots and the open slot that
// is being filled. Memory: Len slots of at most MaxWorkers workers each,
// plus one Latency histogram. Not safe for concurrent use.
type Timeline struct {
	ring       *Ring[Sample]
	maxWorkers int
	// The open slot, when isOpen; lastSlot is the newest slot written to
	// (-1 before the first write): writes for older slots are dropped.
	isOpen   bool
	openSlot int64
	lastSlot int64
	open     Sample
	ttft     Latency
	byID     map[uint64]int // index into open.Workers
}

// New returns a timeline of one sample per step over span (at least one
// slot), keeping at most maxWorkers worker series per slot (at least 1;
// more workers than that are not charted).
func New(step, span time.Duration, maxWorkers int) *Timeline {
	step = max(step, time.Millisecond)
	n := int(max(span/step, 1))
	return &Timeline{ring: NewRing[Sample](step, n), maxWorkers: max(maxWorkers, 1), lastSlot: -1,
		byID: map[uint64]int{}}
}

// Step is the slot width; Len the number of slots kept.
func (t *Timeline) Step() time.Duration { return t.ring.Step() }

// Len is the number of closed slots kept.
func (t *Timeline) Len() int { return t.ring.Len() }

// closeBefore closes the open slot if it is older than slot s.
func (t *Timeline) closeBefore(s int64) {
	if t.isOpen && t.openSlot < s {
		t.ring.Put(t.openSlot, t.closed())
		t.isOpen = false
	}
}

// advance makes now's slot the open one, closing the previous; it reports
// false for a time before the newest slot written (the clock went back:
// such input is dropped).
func (t *Timeline) advance(now time.Time) bool {
	s := t.ring.SlotOf(now)
	if s < t.lastSlot {
		return false
	}
	if t.isOpen && s == t.openSlot {
		return true
	}
	t.closeBefore(s)
	t.isOpen, t.openSlot, t.lastSlot = true, s, s
	t.open = Sample{}
	t.ttft = Latency{}
	clear(t.byID)
	return true
}

// closed is the open slot as it is stored: TTFT quantiles computed,
// workers ordered.
func (t *Timeline) closed() Sample {
	s := t.open
	s.Fleet.TTFTs = int(t.ttft.Count())
	s.Fleet.TTFTP50, s.Fleet.TTFTP99 = t.ttft.Quantile(0.5), t.ttft.Quantile(0.99)
	s.Workers = slices.Clone(s.Workers)
	slices.SortFunc(s.Workers, func(a, b Worker) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return s
}

// worker returns the open slot's entry for id, or nil when the slot has
// maxWorkers already.
func (t *Timeline) worker(id uint64) *Worker {
	if i, ok := t.byID[id]; ok {
		return &t.open.Workers[i]
	}
	if len(t.open.Workers) >= t.maxWorkers {
		return nil
	}
	t.byID[id] = len(t.open.Workers)
	t.open.Workers = append(t.open.Workers, Worker{Gauge: Gauge{ID: id}})
	return &t.open.Workers[len(t.open.Workers)-1]
}

// Finished counts a request that finished at now.
func (t *Timeline) Finished(now time.Time, r Request) {
	if !t.advance(now) {
		return
	}
	t.open.Fleet.Requests++
	if r.Error {
		t.open.Fleet.Errors++
	}
	if !r.Served || !r.HasUsage {
		return
	}
	if w := t.worker(r.Worker); w != nil {
		w.Requests++
		w.PromptTokens += int64(r.PromptTokens)
		w.PredictedTokens += int64(r.PredictedTokens)
		w.ActualTokens += int64(r.ActualTokens)
	}
}

// FirstToken counts a time to first token observed at now.
func (t *Timeline) FirstToken(now time.Time, ttft time.Duration) {
	if t.advance(now) {
		t.ttft.Observe(ttft)
	}
}

// Read records the workers' load read at now (replacing an earlier
// reading in the same slot).
func (t *Timeline) Read(now time.Time, gauges []Gauge) {
	if !t.advance(now) {
		return
	}
	for _, g := range gauges {
		if w := t.worker(g.ID); w != nil {
			w.Gauge, w.HasGauge = g, true
		}
	}
}

// Point is one slot of history with its start; Elapsed is the slot's
// length (less than Step for the open slot).
type Point struct {
	Start   time.Time
	Elapsed time.Duration
	Sample
}

// History returns the slots of the span ending at now, oldest first: the
// closed ones held and, last, the open one when it is now's slot (as far
// as it has got). Slots nothing was recorded in are left out.
func (t *Timeline) History(now time.Time) []Point {
	last := t.ring.SlotOf(now)
	t.closeBefore(last)
	step := t.ring.Step()
	var out []Point
	for _, p := range t.ring.Window(last) {
		out = append(out, Point{Start: p.Start, Elapsed: step, Sample: p.V})
	}
	if t.isOpen && t.openSlot == last {
		start := t.ring.SlotStart(last)
		// The ring holds at most Len-1 slots before it: the span's Len.
		out = append(out, Point{Start: start, Elapsed: min(max(now.Sub(start), 0), step), Sample: t.closed()})
	}
	return out
}
