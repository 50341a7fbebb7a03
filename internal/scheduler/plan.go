package scheduler

import "math/rand/v2"

// Peeker is implemented by policies whose Choose changes their own state
// (round-robin's rotation). Peek returns what Choose would return now and
// leaves the state as it was, so that planning a request (the admission
// queue's predicted prefill, /v1/query, a PD plan) does not shift later
// choices.
type Peeker interface {
	// Peek is Choose without its side effect on the policy.
	Peek(rows []Explanation, temperature float64, rng *rand.Rand) int
}

var _ Peeker = (*RoundRobin)(nil)

// PlanInto is SelectInto for a decision that will not be acted on: a
// Peeker policy peeks instead of choosing. The caller keeps rng's draws
// off the real sequence (pass a copy) for the plan to leave no trace.
func (s *Scheduler) PlanInto(rows []Explanation, req Request, cands []Candidate, rng *rand.Rand) (Decision, error) {
	s.planning = true
	defer func() { s.planning = false }()
	return s.SelectInto(rows, req, cands, rng)
}

// Peek implements Peeker: the rank Choose would pick, rotation unchanged.
func (p *RoundRobin) Peek(rows []Explanation, temperature float64, rng *rand.Rand) int {
	q := *p
	return q.Choose(rows, temperature, rng)
}
