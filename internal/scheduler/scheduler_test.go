package scheduler

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

func w(id int) kvevent.WorkerRank { return kvevent.WorkerRank{ID: kvevent.WorkerID(id)} }

func newSched(t *testing.T, cfg Config, p Policy) *Scheduler {
	t.Helper()
	s, err := New(cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func costs(d Decision) []float64 {
	out := make([]float64, len(d.Candidates))
	for i, r := range d.Candidates {
		out[i] = r.Cost
	}
	return out
}

// TestSeedWorkedExample is design §1's example: raw prefill 10 blocks on
// each of three workers, device overlap 2 / 5 / 8, decode blocks 10 / 5 / 9,
// credit 1.0 -> costs 18 / 10 / 11 and the second worker (index 1, "worker 2"
// counting from one) is chosen.
func TestSeedWorkedExample(t *testing.T) {
	s := newSched(t, DefaultConfig(), KV{})
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 2}, DecodeBlocks: 10},
		{Worker: w(2), Overlap: Overlap{Device: 5}, DecodeBlocks: 5},
		{Worker: w(3), Overlap: Overlap{Device: 8}, DecodeBlocks: 9},
	}
	d, err := s.Select(Request{InputTokens: 160, BlockSize: 16}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	if got := costs(d); got[0] != 18 || got[1] != 10 || got[2] != 11 {
		t.Fatalf("costs = %v, want [18 10 11]", got)
	}
	for i, r := range d.Candidates {
		if r.RawPrefillBlocks != 10 {
			t.Errorf("row %d raw prefill = %v, want 10", i, r.RawPrefillBlocks)
		}
	}
	if d.Chosen != 1 || d.Worker != w(2) {
		t.Fatalf("chose index %d (%v), want index 1: the second worker", d.Chosen, d.Worker)
	}
}

// TestWorkedExampleClampOff is the worked example with the clamp off: no
// credit there exceeds the raw prefill, so nothing changes.
func TestWorkedExampleClampOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.PrefillClamp = false
	s := newSched(t, cfg, KV{})
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 2}, DecodeBlocks: 10},
		{Worker: w(2), Overlap: Overlap{Device: 5}, DecodeBlocks: 5},
		{Worker: w(3), Overlap: Overlap{Device: 8}, DecodeBlocks: 9},
	}
	d, err := s.Select(Request{InputTokens: 160, BlockSize: 16}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	if got := costs(d); got[0] != 18 || got[1] != 10 || got[2] != 11 || d.Chosen != 1 {
		t.Fatalf("costs = %v, chosen %d, want [18 10 11] and index 1", got, d.Chosen)
	}
}

// TestPrefillClampOff is a hand-computed example where the clamp ties a
// partial and a full hit: block 16, 160 input tokens (10 blocks), credit 4,
// prefill load scale 2, no pending prefill.
//
//	A: device overlap 3  -> raw 10, credit 12, adjusted max(-2, 0) = 0 | -2,   decode 6 -> cost 6 | 2·(-2)+6 = 2
//	B: device overlap 10 -> raw 10, credit 40, adjusted max(-30, 0) = 0 | -30, decode 6 -> cost 6 | 2·(-30)+6 = -54
//	C: no overlap, 32 pending prefill tokens -> raw 12, credit 0, adjusted 12, decode 0 -> cost 24 either way
//
// With the clamp (the default) A and B tie at 6 and either may win; without
// it B, the longer prefix, wins and the rows show the negative adjusted
// prefill.
func TestPrefillClampOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.OverlapScoreCredit, cfg.PrefillLoadScale = 4, 2
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 3}, DecodeBlocks: 6},
		{Worker: w(2), Overlap: Overlap{Device: 10}, DecodeBlocks: 6},
		{Worker: w(3), ActivePrefillTokens: 32},
	}
	req := Request{InputTokens: 160, BlockSize: 16}

	clamped := newSched(t, cfg, KV{})
	chosen := map[int]int{}
	for seed := range uint64(64) {
		d, err := clamped.Select(req, cands, seeded(seed))
		if err != nil {
			t.Fatal(err)
		}
		if got := costs(d); got[0] != 6 || got[1] != 6 || got[2] != 24 {
			t.Fatalf("clamp on: costs %v, want [6 6 24]", got)
		}
		if d.Candidates[0].AdjustedPrefillBlocks != 0 || d.Candidates[1].AdjustedPrefillBlocks != 0 {
			t.Fatalf("clamp on: adjusted prefill %v, %v, want 0", d.Candidates[0].AdjustedPrefillBlocks, d.Candidates[1].AdjustedPrefillBlocks)
		}
		chosen[d.Chosen]++
	}
	if chosen[0] == 0 || chosen[1] == 0 || chosen[2] != 0 {
		t.Fatalf("clamp on: choices %v, want the tie between rows 0 and 1 broken both ways", chosen)
	}

	cfg.PrefillClamp = false
	open := newSched(t, cfg, KV{})
	for seed := range uint64(16) {
		d, err := open.Select(req, cands, seeded(seed))
		if err != nil {
			t.Fatal(err)
		}
		want := []struct{ raw, credit, adjusted, cost float64 }{{10, 12, -2, 2}, {10, 40, -30, -54}, {12, 0, 12, 24}}
		for i, r := range d.Candidates {
			if r.RawPrefillBlocks != want[i].raw || r.CreditBlocks != want[i].credit || r.AdjustedPrefillBlocks != want[i].adjusted || r.Cost != want[i].cost {
				t.Fatalf("clamp off: row %d = %+v, want %+v", i, r, want[i])
			}
		}
		if d.Chosen != 1 || d.Worker != w(2) {
			t.Fatalf("clamp off: chose row %d, want 1 (the full prefix)", d.Chosen)
		}
	}
}

func TestCostEveryKnob(t *testing.T) {
	cfg := Config{
		OverlapScoreCredit:        0.5,
		OverlapScoreCreditDecay:   2,
		PrefillLoadScale:          3,
		HostCacheHitWeight:        0.75,
		DiskCacheHitWeight:        0.25,
		SharedCacheMultiplier:     0.5,
		DecodeActiveRequestWeight: 4,
		TrackPrefillTokens:        true,
		PrefillClamp:              true,
	}
	s := newSched(t, cfg, KV{})
	// Block 10, 100 input tokens -> 10 request blocks.
	cands := []Candidate{
		{Worker: w(1), ActivePrefillTokens: 0, Overlap: Overlap{Device: 4, Host: 2, Disk: 4, Shared: 2}, DecodeBlocks: 7, ActiveRequests: 1},
		{Worker: w(2), ActivePrefillTokens: 50, Overlap: Overlap{Device: 6}, DecodeBlocks: 2, ActiveRequests: 3},
	}
	d, err := s.Select(Request{InputTokens: 100, BlockSize: 10}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	// w1: raw 10, decay 1, credit 0.5*4 + 0.75*2 + 0.25*4 + 0.5*2 = 5.5,
	//     adjusted 4.5, cost 3*4.5 + 7 + 4*1 = 24.5.
	// w2: raw 15, excess (50/10)/10 = 0.5, decay 1/(1+2*0.5) = 0.5,
	//     credit 0.5*0.5*6 = 1.5, adjusted 13.5, cost 40.5 + 2 + 12 = 54.5.
	r1, r2 := d.Candidates[0], d.Candidates[1]
	if r1.CreditBlocks != 5.5 || r1.AdjustedPrefillBlocks != 4.5 || r1.Cost != 24.5 {
		t.Errorf("w1 = %+v", r1)
	}
	if r2.RawPrefillBlocks != 15 || r2.CreditBlocks != 1.5 || r2.Cost != 54.5 {
		t.Errorf("w2 = %+v", r2)
	}
	// Overrides: credit 0 and scale 1 -> w1 10+7+4 = 21, w2 15+2+12 = 29.
	zero, one := 0.0, 1.0
	d, _ = s.Select(Request{InputTokens: 100, BlockSize: 10, Overrides: Overrides{OverlapScoreCredit: &zero, PrefillLoadScale: &one}}, cands, seeded(1))
	if got := costs(d); got[0] != 21-0.75*2-0.25*4-0.5*2 || got[1] != 29 {
		t.Errorf("with overrides costs = %v, want [17.5 29]", got)
	}
	// Adjusted prefill never goes below zero.
	d, _ = s.Select(Request{InputTokens: 10, BlockSize: 10}, []Candidate{{Worker: w(1), Overlap: Overlap{Device: 50}, DecodeBlocks: 1}}, seeded(1))
	if d.Candidates[0].AdjustedPrefillBlocks != 0 || d.Candidates[0].Cost != 1 {
		t.Errorf("floor at zero: %+v", d.Candidates[0])
	}
	// Prefill tracking off: raw prefill is 0, cost is decode only.
	cfg.TrackPrefillTokens = false
	s = newSched(t, cfg, KV{})
	d, _ = s.Select(Request{InputTokens: 100, BlockSize: 10}, cands, seeded(1))
	if got := costs(d); got[0] != 7+4 || got[1] != 2+12 {
		t.Errorf("prefill tracking off: costs %v, want [11 14]", got)
	}
}

func TestTieBreakUniform(t *testing.T) {
	s := newSched(t, DefaultConfig(), KV{})
	cands := []Candidate{
		{Worker: w(1), DecodeBlocks: 3}, {Worker: w(2), DecodeBlocks: 1},
		{Worker: w(3), DecodeBlocks: 1}, {Worker: w(4), DecodeBlocks: 1},
	}
	rng := seeded(7)
	counts := map[kvevent.WorkerRank]int{}
	const n = 30000
	for range n {
		d, err := s.Select(Request{InputTokens: 0, BlockSize: 16}, cands, rng)
		if err != nil {
			t.Fatal(err)
		}
		counts[d.Worker]++
	}
	if counts[w(1)] != 0 {
		t.Fatalf("the costlier worker was chosen %d times", counts[w(1)])
	}
	for _, id := range []int{2, 3, 4} {
		if f := float64(counts[w(id)]) / n; math.Abs(f-1.0/3) > 0.015 {
			t.Errorf("worker %d chosen with frequency %.4f, want 1/3", id, f)
		}
	}
}

func TestSoftmaxMatchesFormula(t *testing.T) {
	for _, temp := range []float64{0.25, 1, 4} {
		cfg := DefaultConfig()
		cfg.Temperature = temp
		s := newSched(t, cfg, KV{})
		dec := []float64{0, 1, 3, 10}
		var cands []Candidate
		for i, b := range dec {
			cands = append(cands, Candidate{Worker: w(i), DecodeBlocks: b})
		}
		// Independent expectation straight from the formula.
		want := make([]float64, len(dec))
		sum := 0.0
		for i, c := range dec {
			want[i] = math.Exp(-(c - 0) / ((10 - 0) * temp))
			sum += want[i]
		}
		for i := range want {
			want[i] /= sum
		}
		rng := seeded(42)
		counts := make([]int, len(dec))
		const n = 100000
		for k := range n {
			d, err := s.Select(Request{BlockSize: 16}, cands, rng)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				for i, r := range d.Candidates {
					if math.Abs(r.Probability-want[i]) > 1e-12 {
						t.Errorf("T=%v row %d probability %v, formula %v", temp, i, r.Probability, want[i])
					}
				}
			}
			counts[d.Chosen]++
		}
		for i := range dec {
			f := float64(counts[i]) / n
			// 5 standard deviations of a binomial frequency.
			tol := 5 * math.Sqrt(want[i]*(1-want[i])/n)
			if math.Abs(f-want[i]) > tol {
				t.Errorf("T=%v worker %d: frequency %.4f, formula %.4f (tol %.4f)", temp, i, f, want[i], tol)
			}
		}
	}
}

func TestSoftmaxUniformWhenEqual(t *testing.T) {
	one := 1.0
	s := newSched(t, DefaultConfig(), KV{})
	cands := []Candidate{{Worker: w(1), DecodeBlocks: 2}, {Worker: w(2), DecodeBlocks: 2}}
	d, _ := s.Select(Request{BlockSize: 16, Overrides: Overrides{Temperature: &one}}, cands, seeded(3))
	if d.Temperature != 1 || d.Candidates[0].Probability != 0.5 || d.Candidates[1].Probability != 0.5 {
		t.Fatalf("equal costs at T=1 (override): %+v", d)
	}
}

func TestSeededDecisionsAreReproducible(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Temperature = 0.7
	run := func() []int {
		s := newSched(t, cfg, KV{})
		rng := seeded(99)
		var out []int
		for range 50 {
			d, _ := s.Select(Request{BlockSize: 16}, []Candidate{{Worker: w(1), DecodeBlocks: 1}, {Worker: w(2), DecodeBlocks: 2}, {Worker: w(3), DecodeBlocks: 4}}, rng)
			out = append(out, d.Chosen)
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("draw %d differs: %d vs %d", i, a[i], b[i])
		}
	}
}

func TestBusyThresholds(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ActiveDecodeBlocksThreshold = 0.5
	cfg.ActivePrefillTokensThreshold = 1000
	cfg.ActivePrefillTokensThresholdFrac = 2
	s := newSched(t, cfg, KV{})
	cands := []Candidate{
		{Worker: w(1), ActiveBlocks: 51, KVCapacityBlocks: 100},                    // decode busy
		{Worker: w(2), ActivePrefillTokens: 1001},                                  // prefill absolute
		{Worker: w(3), ActivePrefillTokens: 900, MaxBatchedTokens: 400},            // prefill frac
		{Worker: w(4), ActiveBlocks: 50, KVCapacityBlocks: 100, DecodeBlocks: 900}, // at threshold: ok
	}
	d, err := s.Select(Request{BlockSize: 16}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	want := []Exclusion{BusyDecodeBlocks, BusyPrefillTokens, BusyPrefillFrac, Eligible}
	for i, r := range d.Candidates {
		if r.Excluded != want[i] {
			t.Errorf("row %d excluded %q, want %q", i, r.Excluded, want[i])
		}
	}
	if d.Worker != w(4) {
		t.Fatalf("chose %v, want the only non-busy worker 4", d.Worker)
	}
	if _, err := s.Select(Request{BlockSize: 16}, cands[:3], seeded(1)); !errors.Is(err, ErrAllBusy) {
		t.Fatalf("all busy: err = %v, want ErrAllBusy", err)
	}
	// A pinned worker that is busy leaves nobody.
	if _, err := s.Select(Request{BlockSize: 16, HasPinned: true, PinnedWorker: 1}, cands, seeded(1)); !errors.Is(err, ErrAllBusy) {
		t.Fatalf("pinned busy: err = %v, want ErrAllBusy", err)
	}
	// Thresholds are opt-in: the default config keeps everyone.
	_, err = newSched(t, DefaultConfig(), KV{}).Select(Request{BlockSize: 16}, cands[:3], seeded(1))
	if err != nil {
		t.Fatalf("default config must not reject: %v", err)
	}
}

func TestEligibility(t *testing.T) {
	s := newSched(t, DefaultConfig(), KV{})
	cands := []Candidate{
		{Worker: kvevent.WorkerRank{ID: 1, Rank: 0}},
		{Worker: kvevent.WorkerRank{ID: 1, Rank: 1}},
		{Worker: kvevent.WorkerRank{ID: 2, Rank: 0}, Down: true},
		{Worker: kvevent.WorkerRank{ID: 3, Rank: 2}},
	}
	cases := []struct {
		name string
		req  Request
		want []Exclusion
	}{
		{"all", Request{}, []Exclusion{Eligible, Eligible, ExcludedDown, Eligible}},
		{"allow", Request{AllowedWorkers: []kvevent.WorkerID{3}}, []Exclusion{ExcludedNotAllow, ExcludedNotAllow, ExcludedDown, Eligible}},
		{"pinned", Request{HasPinned: true, PinnedWorker: 1}, []Exclusion{Eligible, Eligible, ExcludedDown, ExcludedNotPinned}},
		{"dp", Request{DPRankStart: 1, DPRankSize: 2}, []Exclusion{ExcludedDPRank, Eligible, ExcludedDown, Eligible}},
	}
	for _, c := range cases {
		c.req.BlockSize = 16
		d, err := s.Select(c.req, cands, seeded(1))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for i, r := range d.Candidates {
			if r.Excluded != c.want[i] {
				t.Errorf("%s row %d: %q, want %q", c.name, i, r.Excluded, c.want[i])
			}
		}
		if d.Candidates[d.Chosen].Excluded != Eligible {
			t.Errorf("%s: chose an excluded row", c.name)
		}
	}
	if _, err := s.Select(Request{BlockSize: 16, HasPinned: true, PinnedWorker: 2}, cands, seeded(1)); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("pinned down worker: err = %v, want ErrNoCandidates", err)
	}
	if _, err := s.Select(Request{BlockSize: 16}, nil, seeded(1)); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("no workers: err = %v", err)
	}
	if _, err := s.Select(Request{}, cands, seeded(1)); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("block size 0: err = %v", err)
	}
}

func TestPolicies(t *testing.T) {
	cands := []Candidate{
		{Worker: w(1), ActiveBlocks: 5, DecodeBlocks: 5, ActivePrefillTokens: 0},
		{Worker: w(2), ActiveBlocks: 2, DecodeBlocks: 50, ActivePrefillTokens: 9},
		{Worker: w(3), ActiveBlocks: 2, DecodeBlocks: 50, ActivePrefillTokens: 3},
	}
	req := Request{BlockSize: 16}
	rr := newSched(t, DefaultConfig(), &RoundRobin{})
	var seq []kvevent.WorkerID
	for range 5 {
		d, _ := rr.Select(req, cands, seeded(1))
		seq = append(seq, d.Worker.ID)
	}
	if want := []kvevent.WorkerID{1, 2, 3, 1, 2}; !slices.Equal(seq, want) {
		t.Errorf("round-robin order %v, want %v", seq, want)
	}
	// After worker 2, with worker 3 excluded, round-robin wraps to 1.
	d, _ := rr.Select(Request{BlockSize: 16, AllowedWorkers: []kvevent.WorkerID{1, 2}}, cands, seeded(1))
	if d.Worker != w(1) {
		t.Errorf("round-robin wrap: %v", d.Worker)
	}
	ll := newSched(t, DefaultConfig(), LeastLoaded{})
	if d, _ := ll.Select(req, cands, seeded(1)); d.Worker != w(3) {
		t.Errorf("least-loaded chose %v, want 3 (2 blocks, fewer prefill tokens)", d.Worker)
	}
	rnd := newSched(t, DefaultConfig(), Random{})
	counts := map[kvevent.WorkerRank]int{}
	rng := seeded(5)
	for range 3000 {
		d, _ := rnd.Select(req, cands, rng)
		counts[d.Worker]++
	}
	for _, c := range cands {
		if counts[c.Worker] < 850 || counts[c.Worker] > 1150 {
			t.Errorf("random: %v chosen %d of 3000", c.Worker, counts[c.Worker])
		}
	}
	for _, name := range []string{"kv", "round-robin", "random", "least-loaded"} {
		p, err := NewPolicy(name)
		if err != nil || p.Name() != name {
			t.Errorf("NewPolicy(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := NewPolicy("best"); !errors.Is(err, ErrConfig) {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []Config{{OverlapScoreCredit: -1}, {Temperature: math.NaN()}, {PrefillLoadScale: math.Inf(1)}, {ActivePrefillTokensThreshold: -3}} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
}

// PlanInto peeks: the round-robin rotation it reports is the one the
// next SelectInto follows.
func TestPlanIntoKeepsRotation(t *testing.T) {
	s, err := New(DefaultConfig(), &RoundRobin{})
	if err != nil {
		t.Fatal(err)
	}
	cands := []Candidate{{Worker: kvevent.WorkerRank{ID: 1}}, {Worker: kvevent.WorkerRank{ID: 2}}}
	req := Request{InputTokens: 16, BlockSize: 16}
	rng := rand.New(rand.NewPCG(1, 2))
	for i, want := range []kvevent.WorkerID{1, 2, 1} {
		for range 2 {
			if d, err := s.PlanInto(nil, req, cands, rng); err != nil || d.Worker.ID != want {
				t.Fatalf("plan before select %d: %v, %v; want worker %d", i, d.Worker, err, want)
			}
		}
		if d, err := s.SelectInto(nil, req, cands, rng); err != nil || d.Worker.ID != want {
			t.Fatalf("select %d: %v, %v; want worker %d", i, d.Worker, err, want)
		}
	}
}
