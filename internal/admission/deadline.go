package admission

import (
	"math"
	"time"

	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// Late reports whether e, released at now, can no longer meet
// Config.TTFTTarget when its prefill takes at least prefill (see
// LeastPrefill): its wait so far plus that is over the target. Always
// false when the target is off. The caller refuses a late entry (it has
// been popped: Done ends its count in flight) and releases the next, so
// the capacity goes to a request that can still meet the target.
func (q *Queue) Late(e Entry, now time.Time, prefill time.Duration) bool {
	target := q.cfg.TTFTTarget
	if target <= 0 {
		return false
	}
	wait := max(now.Sub(e.Arrival), 0)
	// Compared as prefill > target − wait, which cannot overflow as
	// wait + prefill can (a saturated LeastPrefill).
	return wait > target || max(prefill, 0) > target-wait
}

// LeastPrefill is the least time from release to first token predicted
// for a request of prompt tokens routed to the worker of row (a
// decision's chosen row): its own uncached tokens (the prompt less the
// prefix cached there, in blocks of blockSize tokens) computed beside the
// decodes of the requests running there, as if nothing else were queued
// ahead of it (the prefill booked there is left out: the engine may
// overlap it, and a request is refused only when it cannot make it even
// so). p is that worker's fitted per-pass prefill polynomial, in
// milliseconds over the tokens of one pass (router.TimeModel.Prefill;
// timemodel.PriorPrefill for a worker with no samples yet), summed over
// the passes of chunk tokens the job needs (timemodel.Job.Passes), as the
// time model fits it. Never negative; saturates at the longest Duration.
func LeastPrefill(p timemodel.Poly, row scheduler.Explanation, prompt, blockSize, chunk int) time.Duration {
	job := timemodel.Job{Uncached: prompt - row.Overlap.Device*max(blockSize, 1), Decodes: row.ActiveRequests, Chunk: chunk}
	k, n, n2 := job.Passes(timemodel.DefaultConfig().DefaultChunkTokens)
	ms := p.A*k + p.B*n + p.C*n2
	switch {
	case !(ms > 0):
		return 0
	case ms >= float64(math.MaxInt64)/float64(time.Millisecond):
		return math.MaxInt64 // a float past int64 would convert to a negative duration
	}
	return time.Duration(ms * float64(time.Millisecond))
}
