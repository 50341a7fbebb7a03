package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Policy chooses one row among eligible candidates.
//
// Choose gets the eligible rows (at least one, kv costs filled in, in
// candidate order), the request's temperature and a non-nil source; it
// returns the index of the chosen row and may set Probability on rows. It
// must not keep rows after returning.
type Policy interface {
	// Name is the policy's configuration name.
	Name() string
	// Choose returns the index of the chosen row.
	Choose(rows []Explanation, temperature float64, rng *rand.Rand) int
}

var (
	_ Policy = KV{}
	_ Policy = (*RoundRobin)(nil)
	_ Policy = Random{}
	_ Policy = LeastLoaded{}
)

// Policy names accepted by NewPolicy.
const (
	PolicyKV          = "kv"
	PolicyRoundRobin  = "round-robin"
	PolicyRandom      = "random"
	PolicyLeastLoaded = "least-loaded"
)

// NewPolicy returns the policy with the given name.
func NewPolicy(name string) (Policy, error) {
	switch name {
	case PolicyKV, "":
		return KV{}, nil
	case PolicyRoundRobin:
		return &RoundRobin{}, nil
	case PolicyRandom:
		return Random{}, nil
	case PolicyLeastLoaded:
		return LeastLoaded{}, nil
	case PolicyKVTime:
		return NewKVTime(DefaultKVTimeConfig(), nil)
	}
	return nil, fmt.Errorf("%w: unknown policy %q (want kv, kv-time, round-robin, random or least-loaded)", ErrConfig, name)
}

// KV picks the lowest cost at temperature 0 (exact ties uniformly at
// random) and samples the min-max normalised softmax above it.
type KV struct{}

// Name returns "kv".
func (KV) Name() string { return PolicyKV }

// Choose implements Policy.
func (KV) Choose(rows []Explanation, temperature float64, rng *rand.Rand) int {
	if temperature <= 0 {
		return argminCost(rows, rng)
	}
	return softmax(rows, temperature, rng)
}

// argmin returns the index of the lowest row by compare; ties are broken
// uniformly at random by reservoir sampling (the source is consulted only on
// ties).
func argmin(rows []Explanation, compare func(a, b *Explanation) int, rng *rand.Rand) int {
	best, ties := 0, 1
	for i := 1; i < len(rows); i++ {
		switch c := compare(&rows[i], &rows[best]); {
		case c < 0:
			best, ties = i, 1
		case c == 0:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// argminCost is argmin by cmp.Compare of the rows' Cost, written out: the
// comparison through a func value is not inlined, and it ran once per
// worker.
func argminCost(rows []Explanation, rng *rand.Rand) int {
	best, ties := 0, 1
	if len(rows) == 0 {
		return 0
	}
	lo := rows[0].Cost
	for i := 1; i < len(rows); i++ {
		switch c := cmp.Compare(rows[i].Cost, lo); {
		case c < 0:
			best, ties, lo = i, 1, rows[i].Cost
		case c == 0:
			ties++
			if rng.IntN(ties) == 0 {
				best, lo = i, rows[i].Cost
			}
		}
	}
	return best
}

// softmax sets each row's probability p_i ∝ exp(−(c_i − min)/((max − min)·T))
// (uniform when all costs are equal) and draws one by walking the
// cumulative sum with u ~ U[0,1); the last row is the fallback.
func softmax(rows []Explanation, t float64, rng *rand.Rand) int {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		lo, hi = min(lo, r.Cost), max(hi, r.Cost)
	}
	sum := 0.0
	for i := range rows {
		w := 1.0
		if hi > lo {
			w = math.Exp(-(rows[i].Cost - lo) / ((hi - lo) * t))
		}
		rows[i].Probability = w
		sum += w
	}
	for i := range rows {
		rows[i].Probability /= sum
	}
	u, cum := rng.Float64(), 0.0
	for i, r := range rows {
		cum += r.Probability
		if u <= cum {
			return i
		}
	}
	return len(rows) - 1
}

// RoundRobin cycles through worker ranks in (id, rank) order, ignoring
// cache and load: after worker w it picks the eligible worker rank that
// follows w, wrapping around.
type RoundRobin struct {
	last    kvevent.WorkerRank
	started bool
}

// Name returns "round-robin".
func (*RoundRobin) Name() string { return PolicyRoundRobin }

// Choose implements Policy.
func (p *RoundRobin) Choose(rows []Explanation, _ float64, _ *rand.Rand) int {
	next, first := -1, 0
	for i, r := range rows {
		if less(r.Worker, rows[first].Worker) {
			first = i
		}
		if p.started && less(p.last, r.Worker) && (next < 0 || less(r.Worker, rows[next].Worker)) {
			next = i
		}
	}
	if next < 0 {
		next = first
	}
	p.last, p.started = rows[next].Worker, true
	return next
}

func less(a, b kvevent.WorkerRank) bool {
	return a.ID < b.ID || (a.ID == b.ID && a.Rank < b.Rank)
}

// Random picks uniformly at random, ignoring cache and load.
type Random struct{}

// Name returns "random".
func (Random) Name() string { return PolicyRandom }

// Choose implements Policy.
func (Random) Choose(rows []Explanation, _ float64, rng *rand.Rand) int {
	for i := range rows {
		rows[i].Probability = 1 / float64(len(rows))
	}
	return rng.IntN(len(rows))
}

// LeastLoaded picks the fewest active decode blocks, then the fewest
// pending prefill tokens, ignoring the cache; remaining ties at random.
type LeastLoaded struct{}

// Name returns "least-loaded".
func (LeastLoaded) Name() string { return PolicyLeastLoaded }

// Choose implements Policy.
func (LeastLoaded) Choose(rows []Explanation, _ float64, rng *rand.Rand) int {
	return argmin(rows, func(a, b *Explanation) int {
		if c := cmp.Compare(a.ActiveBlocks, b.ActiveBlocks); c != 0 {
			return c
		}
		return cmp.Compare(a.ActivePrefillTokens, b.ActivePrefillTokens)
	}, rng)
}
