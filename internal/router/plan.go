package router

import (
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// planRand is the source a plan draws from: a copy of the router's PCG
// taken at each plan, so the draws a plan makes never shift the ones the
// next Route makes.
type planRand struct {
	pcg rand.PCG
	rng *rand.Rand
}

// selectInto runs the scheduler: for a booking on the router's source,
// for a plan as a plan (scheduler.PlanInto) on a copy of it. Under r.mu.
func (r *Router) selectInto(book bool, rows []scheduler.Explanation, req scheduler.Request, cands []scheduler.Candidate) (scheduler.Decision, error) {
	if book {
		return r.sched.SelectInto(rows, req, cands, r.rng)
	}
	if r.plan.rng == nil {
		r.plan.rng = rand.New(&r.plan.pcg)
	}
	r.plan.pcg = *r.pcg
	return r.sched.PlanInto(rows, req, cands, r.plan.rng)
}

// rejectIf counts a failed decision when it was a booking (a failed plan
// is no rejection: nothing was refused). Under r.mu.
func (r *Router) rejectIf(book bool) {
	if book {
		r.stats.Rejected++
	}
}
