package admission

import "time"

// Staggered release (Config.StaggerGap).
//
// Why: under one tenant's flood every worker runs one of its prefills
// and a light tenant's request, first in the fair order, still waits for
// the first of those prefills to end. Its wait is the least of the
// workers' residual prefill times, and that is short only when the
// prefills end spread out in time. Nothing spreads them: each worker
// takes the next request the moment its prefill ends, so whatever phase
// the workers fall into (two released in the same instant, steps of
// different lengths drifting together) they keep, and at times all end
// within a few milliseconds of each other and then not again for a whole
// prefill. So while a tenant crowds another, the queue holds a release of
// the crowding tenant whose prefill would be predicted to end close to
// another released prefill's predicted end, for a short while, until it
// would end clear of them. The light tenant is never held, and may take
// the worker a hold leaves idle. The price is that idle time, paid by the
// crowding tenant's throughput: the fairness scenario's figures are in
// docs/benchmarks.md ("Fairness: one tenant at 10× another's rate").
//
// The caller predicts: when it routes a request (released or not), it
// tells Started when that request's prefill should end (its release time
// plus LeastPrefill on the worker it was routed to), and Finished at its
// first token; before releasing a crowding tenant's request it asks Hold
// with the prefill it predicts for it, and if Hold says to wait it
// releases a request of a tenant that does not crowd (PopUncrowded) or
// none, and looks again once the hold is over.

// Staggers reports whether staggered release is on (Config.StaggerGap
// or Config.StaggerAuto).
func (q *Queue) Staggers() bool { return q.cfg.StaggerGap > 0 || q.cfg.StaggerAuto }

// load is t's requests waiting and in flight over its weight.
func (t *tenant) load() float64 { return float64(t.waiting+max(t.inflight, 0)) / t.weight }

// Crowds reports whether tenant has more requests waiting and in flight,
// relative to its weight, than another tenant that has any: a release of
// tenant is one staggered release may hold. False for a tenant alone.
func (q *Queue) Crowds(tenant string) bool {
	t := q.tenants[tenant]
	if t == nil {
		return false
	}
	least, ok := q.leastLoad()
	return ok && t.load() > least
}

// leastLoad is the least load of a tenant with requests waiting or in
// flight: a tenant crowds another exactly when its load is above it.
func (q *Queue) leastLoad() (float64, bool) {
	least, ok := 0.0, false
	for _, t := range q.tenants {
		if t.waiting > 0 || t.inflight > 0 {
			if l := t.load(); !ok || l < least {
				least, ok = l, true
			}
		}
	}
	return least, ok
}

// Contended reports whether two or more tenants have requests waiting
// or in flight: only then can one crowd another, and only then does the
// caller route a released request among the workers below the
// thresholds (a hold may have left one idle for it).
func (q *Queue) Contended() bool {
	n := 0
	for _, t := range q.tenants {
		if t.waiting > 0 || t.inflight > 0 {
			n++
		}
	}
	return n >= 2
}

// PopUncrowded is Pop among the tenants that crowd no other (Crowds
// false): what to release while a crowding tenant's release is held.
func (q *Queue) PopUncrowded() (Entry, bool) {
	least, _ := q.leastLoad()
	return q.release(q.nextAmong(func(t *tenant) bool { return t.load() > least }))
}

// Started notes that the prefill of the request id, routed at now, is
// predicted to end at end. Ends already past are dropped here and by
// Hold, so a request that never reports Finished (it failed before its
// first token) is forgotten once its end has passed.
func (q *Queue) Started(id string, now, end time.Time) {
	if !q.Staggers() {
		return
	}
	if q.ends == nil {
		q.ends = map[string]time.Time{}
	}
	q.prune(now)
	q.ends[id] = end
}

// prune drops the predicted ends not after now.
func (q *Queue) prune(now time.Time) {
	for id, e := range q.ends {
		if !e.After(now) {
			delete(q.ends, id)
		}
	}
}

// Finished notes the first token of the request id: its prefill ended.
func (q *Queue) Finished(id string) { delete(q.ends, id) }

// Hold returns how long to hold, at now, the release of a request whose
// prefill is predicted to take prefill: 0 when it would end at least
// the gap from every other predicted end not yet past (or when
// staggering is off), else the least wait after which it would, when
// that is at most StaggerMaxHold (3 × the gap when 0), and 0 when no
// such wait is (holding longer costs more than it spreads). The gap is
// StaggerGap, or with StaggerAuto prefill ÷ (the ends not yet past + 1).
func (q *Queue) Hold(now time.Time, prefill time.Duration) time.Duration {
	if !q.Staggers() {
		return 0
	}
	q.prune(now)
	gap := q.cfg.StaggerGap
	if q.cfg.StaggerAuto {
		gap = max(prefill, 0) / time.Duration(len(q.ends)+1)
	}
	if gap <= 0 {
		return 0
	}
	maxHold := q.cfg.StaggerMaxHold
	if maxHold <= 0 {
		maxHold = 3 * gap
	}
	ends := make([]time.Time, 0, len(q.ends))
	for _, e := range q.ends {
		ends = append(ends, e)
	}
	prefill = max(prefill, 0)
	clear := func(wait time.Duration) bool {
		end := now.Add(wait + prefill)
		for _, e := range ends {
			if d := end.Sub(e); d < gap && d > -gap {
				return false
			}
		}
		return true
	}
	if clear(0) {
		return 0
	}
	best := time.Duration(-1)
	for _, e := range ends {
		// The least wait that ends it gap after e.
		w := e.Add(gap).Sub(now) - prefill
		if w > 0 && w <= maxHold && (best < 0 || w < best) && clear(w) {
			best = w
		}
	}
	return max(best, 0)
}
