package scheduler

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sentinel errors of Select.
var (
	// ErrNoCandidates means no worker rank is eligible for the request
	// (none known, all DOWN, or excluded by allow-list, pin or dp range).
	ErrNoCandidates = errors.New("no eligible worker")
	// ErrAllBusy means eligible worker ranks exist but every one is over a
	// busy threshold; the front answers 503 with Retry-After.
	ErrAllBusy = errors.New("all eligible workers are overloaded")
	// ErrBlockSize means the request's block size is not positive.
	ErrBlockSize = errors.New("block size must be positive")
)

// Scheduler applies eligibility, busy thresholds and a Policy. It is not
// safe for concurrent use (policies such as round-robin keep state).
type Scheduler struct {
	cfg    Config
	policy Policy
	elig   []Explanation
	idx    []int
	// planning is set by PlanInto: a Peeker policy peeks.
	planning bool
}

// New returns a scheduler with a validated config and a policy.
func New(cfg Config, p Policy) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p == nil {
		p = KV{}
	}
	return &Scheduler{cfg: cfg, policy: p}, nil
}

// Config returns the scheduler's configuration.
func (s *Scheduler) Config() Config { return s.cfg }

// Policy returns the scheduler's policy.
func (s *Scheduler) Policy() Policy { return s.policy }

// Select chooses a candidate for the request. rng drives tie-breaks and
// sampling; seed it for reproducible decisions. Errors: ErrBlockSize,
// ErrNoCandidates, ErrAllBusy.
func (s *Scheduler) Select(req Request, cands []Candidate, rng *rand.Rand) (Decision, error) {
	return s.SelectInto(nil, req, cands, rng)
}

// SelectInto is Select writing the decision's Candidates into rows when
// its capacity suffices (fresh memory otherwise): pass back the
// Candidates of a decision you are done with. With a thousand candidates
// the explanation is about 140 KB, and allocating and clearing it was
// half the cost of a decision.
func (s *Scheduler) SelectInto(rows []Explanation, req Request, cands []Candidate, rng *rand.Rand) (Decision, error) {
	if req.BlockSize <= 0 {
		return Decision{}, ErrBlockSize
	}
	temp := s.cfg.Temperature
	if o := req.Overrides.Temperature; o != nil && validKnob(*o) {
		temp = *o
	}
	if cap(rows) >= len(cands) {
		rows = rows[:len(cands)]
	} else {
		rows = make([]Explanation, len(cands))
	}
	d := Decision{Policy: s.policy.Name(), Temperature: temp, Chosen: -1, Candidates: rows}
	eligible, busy := 0, 0
	minPrefill := math.MaxInt
	k := s.knobs(&req)
	// Without the credit decay a row's cost does not depend on the other
	// rows: it is computed in the same pass (one pass over a thousand
	// rows instead of two).
	fused := !(s.cfg.TrackPrefillTokens && s.cfg.OverlapScoreCreditDecay > 0)
	th := s.cfg.Thresholds()
	// The kv policy at temperature 0 is an argmin of the cost: with the
	// cost final in this pass it is found here too, over the eligible rows
	// in order (the same comparisons and tie draws as KV.Choose over them),
	// instead of a second pass over a thousand rows and a copy of the
	// eligible ones.
	_, isKV := s.policy.(KV)
	inline := fused && isKV && temp <= 0
	// Most requests name no allow-list, pin or dp range, and most
	// configurations no busy threshold: then only Down is checked.
	restricted := req.HasPinned || len(req.AllowedWorkers) > 0 || req.DPRankSize > 0
	thOn := th.On()
	best, ties, lo := -1, 0, 0.0
	for i := range cands {
		c := &cands[i]
		ex := Eligible
		if c.Down {
			ex = ExcludedDown
		} else if restricted {
			ex = eligibility(&req, c)
		}
		var raw, credit, adj, cost float64
		if ex == Eligible {
			eligible++
			if thOn {
				if ex = th.Busy(c); ex != Eligible {
					busy++
				}
			}
		}
		if ex == Eligible {
			minPrefill = min(minPrefill, c.ActivePrefillTokens)
		}
		if ex == Eligible && fused {
			// s.cost written out for a credit without decay (decay 1:
			// the same operations in the same order, so the same bits).
			if k.track {
				raw = float64(c.ActivePrefillTokens+k.isl) / k.b
			}
			o := &c.Overlap
			credit = k.credit*float64(o.Device) + k.host*float64(o.Host) + k.disk*float64(o.Disk) + k.shared*float64(o.Shared)
			adj = raw - credit
			if k.clamp {
				adj = max(adj, 0)
			}
			cost = k.scale*adj + c.DecodeBlocks + k.active*float64(c.ActiveRequests)
			if inline {
				switch c := compareCost(cost, lo); {
				case best < 0 || c < 0:
					best, ties, lo = i, 1, cost
				case c == 0:
					ties++
					if rng.IntN(ties) == 0 {
						best, lo = i, cost
					}
				}
			}
		}
		// Every field of the reused row written once, in field order
		// (zeroing the row first and then writing its columns stored
		// half of it twice; TestSelectIntoOverwritesEveryField and TestSelectIntoMatchesSelect keep
		// this list whole).
		row := &d.Candidates[i]
		row.Worker = c.Worker
		row.Excluded = ex
		row.Overlap = c.Overlap
		row.RawPrefillBlocks = raw
		row.CreditBlocks = credit
		row.AdjustedPrefillBlocks = adj
		row.DecodeBlocks = c.DecodeBlocks
		row.ActiveBlocks = c.ActiveBlocks
		row.ActivePrefillTokens = c.ActivePrefillTokens
		row.PrefillElapsed = c.PrefillElapsed
		row.ActiveRequests = c.ActiveRequests
		row.Cost = cost
		row.Probability = 0
		row.Prediction = Prediction{}
	}
	switch {
	case eligible == 0:
		return d, fmt.Errorf("selecting among %d workers: %w", len(cands), ErrNoCandidates)
	case eligible == busy:
		return d, fmt.Errorf("selecting among %d eligible workers: %w", eligible, ErrAllBusy)
	}
	if !fused {
		for i := range d.Candidates {
			if row := &d.Candidates[i]; row.Excluded == Eligible {
				s.cost(&k, row, minPrefill)
			}
		}
	}
	if pr, ok := s.policy.(Preparer); ok {
		pr.Prepare(&req, cands, d.Candidates)
	}
	if inline {
		d.Chosen = best
	} else if eligible-busy == len(cands) {
		// Everyone is eligible: the policy works on the rows in place.
		d.Chosen = s.choose(d.Candidates, temp, rng)
	} else {
		s.elig, s.idx = s.elig[:0], s.idx[:0]
		for i, row := range d.Candidates {
			if row.Excluded == Eligible {
				s.elig = append(s.elig, row)
				s.idx = append(s.idx, i)
			}
		}
		k := s.choose(s.elig, temp, rng)
		for j, i := range s.idx {
			d.Candidates[i].Probability = s.elig[j].Probability
		}
		d.Chosen = s.idx[k]
	}
	d.Worker = d.Candidates[d.Chosen].Worker
	return d, nil
}

// choose runs the policy, guarding against an out-of-range answer: a
// broken policy must not panic the router.
func (s *Scheduler) choose(rows []Explanation, temp float64, rng *rand.Rand) int {
	var k int
	if pk, ok := s.policy.(Peeker); ok && s.planning {
		k = pk.Peek(rows, temp, rng)
	} else {
		k = s.policy.Choose(rows, temp, rng)
	}
	if k < 0 || k >= len(rows) {
		return 0
	}
	return k
}

func eligibility(req *Request, c *Candidate) Exclusion {
	switch {
	case c.Down:
		return ExcludedDown
	case req.HasPinned && c.Worker.ID != req.PinnedWorker:
		return ExcludedNotPinned
	case len(req.AllowedWorkers) > 0 && !slices.Contains(req.AllowedWorkers, c.Worker.ID):
		return ExcludedNotAllow
	case req.DPRankSize > 0 && (int(c.Worker.Rank) < req.DPRankStart || int(c.Worker.Rank) >= req.DPRankStart+req.DPRankSize):
		return ExcludedDPRank
	}
	return Eligible
}

// knobs are a request's cost parameters, resolved once per decision, and
// the config's cost weights, copied so that the per-row loop reads them
// from the stack.
type knobs struct {
	credit, scale, b           float64
	isl, reqBlocks             int
	host, disk, shared, active float64
	track, clamp               bool
}

func (s *Scheduler) knobs(req *Request) knobs {
	k := knobs{credit: s.cfg.OverlapScoreCredit, scale: s.cfg.PrefillLoadScale, b: float64(req.BlockSize), isl: max(req.InputTokens, 0),
		host: s.cfg.HostCacheHitWeight, disk: s.cfg.DiskCacheHitWeight, shared: s.cfg.SharedCacheMultiplier,
		active: s.cfg.DecodeActiveRequestWeight, track: s.cfg.TrackPrefillTokens, clamp: s.cfg.PrefillClamp}
	if o := req.Overrides.OverlapScoreCredit; o != nil && validKnob(*o) {
		k.credit = *o
	}
	if o := req.Overrides.PrefillLoadScale; o != nil && validKnob(*o) {
		k.scale = *o
	}
	if req.BlockSize > 0 {
		k.reqBlocks = (k.isl + req.BlockSize - 1) / req.BlockSize
	}
	return k
}

// compareCost is cmp.Compare for costs, with the usual case (two
// numbers) first: the argmin compares a thousand of them per decision.
func compareCost(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	case a == b:
		return 0
	}
	return cmp.Compare(a, b) // a NaN
}

// cost fills the kv cost columns of an eligible row and returns its
// Cost. minPrefill is only read with the credit decay on (then it must
// be final).
func (s *Scheduler) cost(k *knobs, row *Explanation, minPrefill int) float64 {
	decay := 1.0
	if s.cfg.TrackPrefillTokens {
		row.RawPrefillBlocks = float64(row.ActivePrefillTokens+k.isl) / k.b
		if s.cfg.OverlapScoreCreditDecay > 0 && k.reqBlocks > 0 {
			excess := (float64(row.ActivePrefillTokens-minPrefill) / k.b) / float64(k.reqBlocks)
			decay = 1 / (1 + s.cfg.OverlapScoreCreditDecay*excess)
		}
	}
	o := row.Overlap
	row.CreditBlocks = k.credit*decay*float64(o.Device) +
		s.cfg.HostCacheHitWeight*float64(o.Host) +
		s.cfg.DiskCacheHitWeight*float64(o.Disk) +
		s.cfg.SharedCacheMultiplier*float64(o.Shared)
	row.AdjustedPrefillBlocks = row.RawPrefillBlocks - row.CreditBlocks
	if s.cfg.PrefillClamp {
		row.AdjustedPrefillBlocks = max(row.AdjustedPrefillBlocks, 0)
	}
	row.Cost = k.scale*row.AdjustedPrefillBlocks + row.DecodeBlocks + s.cfg.DecodeActiveRequestWeight*float64(row.ActiveRequests)
	return row.Cost
}
