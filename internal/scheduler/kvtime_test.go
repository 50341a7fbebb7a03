package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/timemodel"
	"pgregory.net/rapid"
)

// models is a fixed Models for tests.
type models map[kvevent.WorkerRank]*timemodel.Model

func (m models) Model(w kvevent.WorkerRank) *timemodel.Model { return m[w] }

func newKVTime(t *testing.T, cfg KVTimeConfig, m Models) *Scheduler {
	t.Helper()
	p, err := NewKVTime(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	return newSched(t, DefaultConfig(), p)
}

// priorSeconds walks passes of chunk tokens (decodes take one token each)
// through the mocker's polynomial.
func priorSeconds(tokens, decodes, chunk int) float64 {
	s := 0.0
	for tokens > 0 {
		n := min(tokens, chunk-decodes)
		s += timemodel.PriorPrefillMs(n + decodes)
		tokens -= n
	}
	return s / 1e3
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestKVTimeWorkedExample: 4,000-token prompt, 64-token blocks, no decode
// term. Worker 1 holds 50 blocks (3,200 tokens) but has 30,000 tokens
// booked; worker 2 holds nothing and is idle; worker 3 holds 10 blocks
// with 900 booked. Cold models: the mocker's polynomial.
func TestKVTimeWorkedExample(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight, cfg.RecomputeWeight = 0, 0
	s := newKVTime(t, cfg, nil)
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 50}, ActivePrefillTokens: 30000, MaxBatchedTokens: 8192},
		{Worker: w(2), MaxBatchedTokens: 8192},
		{Worker: w(3), Overlap: Overlap{Device: 10}, ActivePrefillTokens: 900, MaxBatchedTokens: 8192},
	}
	d, err := s.Select(Request{InputTokens: 4000, BlockSize: 64}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ queue, prefill float64 }{
		// 800 own tokens; 30,800 in passes of 8,192: 3 full + 6,224.
		{priorSeconds(30800, 0, 8192) - priorSeconds(800, 0, 8192), priorSeconds(800, 0, 8192)},
		{0, priorSeconds(4000, 0, 8192)},
		// 3,360 own + 900 booked: one pass of 4,260.
		{priorSeconds(4260, 0, 8192) - priorSeconds(3360, 0, 8192), priorSeconds(3360, 0, 8192)},
	}
	for i, r := range d.Candidates {
		p := r.Prediction
		if !near(p.Queue, want[i].queue) || !near(p.Prefill, want[i].prefill) || !near(p.Total, want[i].queue+want[i].prefill) || p.Load != 0 || p.Decode != 0 {
			t.Errorf("row %d prediction %+v, want queue %v prefill %v", i, p, want[i].queue, want[i].prefill)
		}
	}
	// Worker 2: 16.50 + 60.73 + 6.74 = 83.97 ms; worker 3, one pass of
	// 4,260: 16.50 + 64.68 + 7.64 = 88.82 ms. The band is the larger of
	// the tolerance (5 %) and the fastest row's model error (a cold
	// model's: 0.1): 83.97 × 1.1 + 1 = 93.37 ms, so worker 3 is a
	// near-tie, and its prefix is longer; worker 1: 4 passes ≈ 0.63 s.
	for i, r := range d.Candidates {
		if r.Prediction.Error != 0.1 {
			t.Errorf("row %d: cold model error %v, want 0.1", i, r.Prediction.Error)
		}
	}
	if d.Worker != w(3) {
		t.Fatalf("chose %v with rows %+v, want worker 3 (near-tie, longer prefix)", d.Worker, d.Candidates)
	}
	// With 2,000 tokens booked worker 3 needs one pass of 5,360 tokens,
	// 16.50 + 81.38 + 12.10 = 109.98 ms: out of the band, the fastest wins.
	cands[2].ActivePrefillTokens = 2000
	if d, _ := s.Select(Request{InputTokens: 4000, BlockSize: 64}, cands, seeded(1)); d.Worker != w(2) {
		t.Fatalf("chose %v, want worker 2", d.Worker)
	}
	// A tolerance above the model error widens the band: 83.97 × 1.4 + 1
	// = 118.6 ms takes worker 3 back.
	cfg.Tolerance = 0.4
	if d, _ := newKVTime(t, cfg, nil).Select(Request{InputTokens: 4000, BlockSize: 64}, cands, seeded(1)); d.Worker != w(3) {
		t.Fatalf("tolerance 0.4 chose %v, want worker 3", d.Worker)
	}
	if d.Policy != PolicyKVTime {
		t.Fatalf("policy %q", d.Policy)
	}
}

// TestKVTimeLearnedSpeed: two idle workers, the same cache; worker 1's
// model has seen it run twice as slow as the prior, so worker 2 wins and
// worker 1's prediction is about twice the prior's.
func TestKVTimeLearnedSpeed(t *testing.T) {
	slow := timemodel.New(timemodel.DefaultConfig())
	t0 := time.Unix(0, 0)
	for s := range 60 {
		j := timemodel.Job{Uncached: 500 + 100*(s%30), Chunk: 8192}
		slow.ObservePrefill(j, time.Duration(2*priorSeconds(j.Uncached, 0, 8192)*float64(time.Second)), t0.Add(time.Duration(s)*time.Second))
	}
	s := newKVTime(t, DefaultKVTimeConfig(), models{w(1): slow})
	cands := []Candidate{{Worker: w(1), Overlap: Overlap{Device: 10}}, {Worker: w(2), Overlap: Overlap{Device: 10}}}
	d, err := s.Select(Request{InputTokens: 2000, BlockSize: 64}, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	if d.Worker != w(2) {
		t.Fatalf("chose the slow worker: %+v", d.Candidates)
	}
	if r := d.Candidates[0].Prediction.TTFT / priorSeconds(2000-640, 0, 8192); math.Abs(r-2) > 0.1 {
		t.Fatalf("slow worker predicted %.3f × the prior, want 2", r)
	}
}

// TestKVTimeTiersAndDecode: host and disk blocks cost their transfer; the
// decode term is weight × running decodes × (own prefill − the decode
// steps it displaces).
func TestKVTimeTiersAndDecode(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight = 0.5
	cfg.DiskBandwidth = 1e9
	s := newKVTime(t, cfg, nil)
	c := Candidate{Worker: w(1), Overlap: Overlap{Device: 2, Host: 3, Disk: 1}, ActiveRequests: 10, ActiveBlocks: 500, KVCapacityBlocks: 1000, MaxBatchedTokens: 8192}
	d, err := s.Select(Request{InputTokens: 1000, BlockSize: 100}, []Candidate{c}, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	p := d.Candidates[0].Prediction
	load := 300*114688/64e9 + 100*114688/1e9
	prefill := priorSeconds(400, 10, 8192)
	decode := 0.5 * 10 * (prefill + load - timemodel.PriorDecodeMs(0.5)/1e3)
	if !near(p.Load, load) || !near(p.Prefill, prefill) || p.Queue != 0 || !near(p.Decode, decode) || !near(p.Total, prefill+load+decode) {
		t.Fatalf("prediction %+v, want load %v prefill %v decode %v", p, load, prefill, decode)
	}
}

// TestKVTimeChoosesInBand checks on random fleets that the chosen row is
// within the near-tie band of the lowest Total and that no row in the band
// holds a longer prefix; excluded rows carry no prediction.
func TestKVTimeChoosesInBand(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultKVTimeConfig()
		cfg.Tolerance = rapid.Float64Range(0, 0.5).Draw(rt, "tol")
		cfg.DecodeWeight = rapid.Float64Range(0, 1).Draw(rt, "dw")
		cfg.RecomputeWeight = rapid.Float64Range(0, 16).Draw(rt, "rw")
		s := newKVTime(t, cfg, nil)
		n := rapid.IntRange(1, 12).Draw(rt, "n")
		cands := make([]Candidate, n)
		for i := range cands {
			cands[i] = Candidate{
				Worker:              w(i),
				Down:                rapid.IntRange(0, 5).Draw(rt, "down") == 0,
				Overlap:             Overlap{Device: rapid.IntRange(0, 80).Draw(rt, "dev"), Host: rapid.IntRange(0, 10).Draw(rt, "host")},
				ActivePrefillTokens: rapid.IntRange(0, 40000).Draw(rt, "apt"),
				ActiveRequests:      rapid.IntRange(0, 100).Draw(rt, "req"),
				ActiveBlocks:        float64(rapid.IntRange(0, 900).Draw(rt, "blocks")),
				KVCapacityBlocks:    1000,
				MaxBatchedTokens:    rapid.SampledFrom([]int{0, 2048, 8192}).Draw(rt, "chunk"),
			}
			cands[i].DecodeBlocks = cands[i].ActiveBlocks + float64(rapid.IntRange(0, 100).Draw(rt, "new"))
		}
		d, err := s.Select(Request{InputTokens: rapid.IntRange(0, 6000).Draw(rt, "isl"), BlockSize: 64}, cands, seeded(rapid.Uint64().Draw(rt, "seed")))
		if err != nil {
			return // every candidate down
		}
		lo, tol := math.Inf(1), cfg.Tolerance
		for _, r := range d.Candidates {
			if r.Excluded == Eligible {
				if r.Prediction.Total < lo {
					lo, tol = r.Prediction.Total, math.Max(cfg.Tolerance, r.Prediction.Error)
				}
			} else if r.Prediction != (Prediction{}) {
				rt.Fatalf("excluded row has a prediction %+v", r)
			}
		}
		longest := 0
		for _, r := range d.Candidates {
			if r.Excluded == Eligible {
				longest = max(longest, cached(r.Overlap))
			}
		}
		for _, r := range d.Candidates {
			p := r.Prediction
			if r.Excluded != Eligible {
				continue
			}
			if p.Recompute < 0 || p.Later != 0 || math.Abs(p.Total-(p.TTFT+p.KVPressure+p.Decode+p.Later+p.Recompute)) > 1e-12 {
				rt.Fatalf("row %v: %+v (no rate: later 0; total the sum of the terms)", r.Worker, p)
			}
			if cached(r.Overlap) >= longest && p.Recompute != 0 {
				rt.Fatalf("row %v holds the longest prefix (%d blocks) but pays recompute %v", r.Worker, longest, p.Recompute)
			}
		}
		band := lo*(1+tol) + 1e-3
		ch := d.ChosenRow()
		if ch.Prediction.Total > band {
			rt.Fatalf("chose total %v outside the band %v", ch.Prediction.Total, band)
		}
		for _, r := range d.Candidates {
			if r.Excluded == Eligible && r.Prediction.Total <= band && cached(r.Overlap) > cached(ch.Overlap) {
				rt.Fatalf("row %v in the band holds %d blocks, chosen %d", r.Worker, cached(r.Overlap), cached(ch.Overlap))
			}
		}
	})
}

func TestKVTimeConfigValidate(t *testing.T) {
	if err := DefaultKVTimeConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []KVTimeConfig{{Tolerance: -1}, {DecodeWeight: math.NaN()}, {RecomputeWeight: -1}, {RecomputeWeight: math.Inf(1)}, {HostBandwidth: math.Inf(1)}, {KVBytesPerToken: -1}} {
		if _, err := NewKVTime(c, nil); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if p, err := NewPolicy("kv-time"); err != nil || p.Name() != "kv-time" {
		t.Fatalf("NewPolicy(kv-time) = %v, %v", p, err)
	}
}

// TestKVTimeKVWait: a worker whose running requests hold their blocks for
// 10 s on average, holding 900 of 1,000 blocks; this request would bring
// it to 1,040 against 990 usable (1 % headroom), so it waits for 50 of
// the 900 held blocks to free: 10 × 50 / 900 s. Within capacity, or with
// no residence known, it waits nothing; the wait is at most one residence.
// The pressure of its new blocks n at use u = held/990 is
// 10 × n/990 × u/(1 − u), u at most 0.99.
func TestKVTimeKVWait(t *testing.T) {
	m := timemodel.New(timemodel.DefaultConfig())
	m.ObserveResidence(10*time.Second, time.Unix(0, 0))
	s := newKVTime(t, DefaultKVTimeConfig(), models{w(1): m})
	cands := []Candidate{
		{Worker: w(1), ActiveBlocks: 900, DecodeBlocks: 1040, KVCapacityBlocks: 1000},
		{Worker: w(2), ActiveBlocks: 900, DecodeBlocks: 1040, KVCapacityBlocks: 1000}, // no residence known
		{Worker: w(1), ActiveBlocks: 900, DecodeBlocks: 990, KVCapacityBlocks: 1000},
		{Worker: w(1), ActiveBlocks: 10, DecodeBlocks: 3000, KVCapacityBlocks: 1000},
	}
	want := []float64{10 * 50.0 / 900, 0, 0, 10}
	u := func(held float64) float64 { return held / 990 / (1 - held/990) }
	pressure := []float64{10 * 140.0 / 990 * u(900), 0, 10 * 90.0 / 990 * u(900), 10 * 2990.0 / 990 * u(10)}
	for i, c := range cands {
		d, err := s.Select(Request{InputTokens: 64, BlockSize: 64, Now: time.Unix(1, 0)}, []Candidate{c}, seeded(1))
		if err != nil {
			t.Fatal(err)
		}
		p := d.Candidates[0].Prediction
		if !near(p.KVWait, want[i]) || !near(p.KVPressure, pressure[i]) || !near(p.TTFT, p.Queue+p.Prefill+p.Load+p.KVWait) ||
			!near(p.Total, p.TTFT+p.KVPressure+p.Decode) {
			t.Errorf("case %d: prediction %+v, want KV wait %v, pressure %v", i, p, want[i], pressure[i])
		}
	}
}

// TestKVTimeRecomputeWorkedExample: a 4,000-token prompt, 64-token
// blocks, no decode term, cold models. Worker 1 holds 50 blocks (3,200
// tokens) behind 20,000 booked tokens; worker 2 is idle and holds nothing.
// Per pass (the mocker's polynomial, ms): p(800) = 28.918, p(4,000) =
// 83.971, p(8,192) = 169.137, p(4,416) = 91.761.
//
//   - worker 1: 20,800 tokens in passes of 8,192 (2 full + 4,416):
//     TTFT 2 × 169.137 + 91.761 = 430.035 ms, of which queue 401.118; it
//     holds the most, so no recompute.
//   - worker 2: TTFT p(4,000) = 83.971 ms; it would recompute the 3,200
//     tokens worker 1 holds, p(4,000) − p(800) = 55.054 ms, priced at the
//     weight: 8 × 55.054 = 440.428, total 524.400 ms.
//
// Worker 1 wins (430.035 < 524.400; the band, 430.035 × 1.1 + 1 = 474.04,
// leaves worker 2 out). Worker 2 wins again below a weight of
// (430.035 − 83.971) / 55.054 = 6.29: at 4 its total is 304.185 ms.
// Worker 1's running requests hold none of the prompt's 62 blocks (all
// 62 are new there). When they hold its first 50 (12 new), the cached
// prefix is one they share: a copy elsewhere is no waste, nothing is
// priced and worker 2 wins at weight 8 too; holding 20 of them (42 new),
// the other 30 blocks (1,920 tokens) are priced: 8 × (p(4,000) −
// p(2,080)) = 8 × (83.971 − 49.904) = 272.534 ms, total 356.505: still
// below worker 1's 430.035 and out of its band, so worker 2.
func TestKVTimeRecomputeWorkedExample(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight = 0
	cands := []Candidate{
		{Worker: w(1), Overlap: Overlap{Device: 50}, ActivePrefillTokens: 20000, MaxBatchedTokens: 8192, DecodeBlocks: 62},
		{Worker: w(2), MaxBatchedTokens: 8192, DecodeBlocks: 62},
	}
	req := Request{InputTokens: 4000, BlockSize: 64}
	d, err := newKVTime(t, cfg, nil).Select(req, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	ms := func(v float64) float64 { return math.Round(v*1e6) / 1e3 } // seconds to ms, 3 decimals
	p1, p2 := d.Candidates[0].Prediction, d.Candidates[1].Prediction
	if ms(p1.TTFT) != 430.035 || ms(p1.Queue) != 401.118 || p1.Recompute != 0 || ms(p1.Total) != 430.035 {
		t.Errorf("worker 1: %+v", p1)
	}
	if ms(p2.TTFT) != 83.971 || ms(p2.Recompute) != 440.428 || ms(p2.Total) != 524.4 {
		t.Errorf("worker 2: %+v", p2)
	}
	if d.Worker != w(1) {
		t.Fatalf("weight 8 chose %v, want worker 1 (its cache)", d.Worker)
	}
	cfg.RecomputeWeight = 4
	d, _ = newKVTime(t, cfg, nil).Select(req, cands, seeded(1))
	if p := d.Candidates[1].Prediction; d.Worker != w(2) || ms(p.Total) != 304.185 {
		t.Fatalf("weight 4 chose %v, worker 2 total %v, want worker 2 at 304.185 ms", d.Worker, ms(p.Total))
	}
	cfg.RecomputeWeight = 8
	cands[0].DecodeBlocks = 12
	d, _ = newKVTime(t, cfg, nil).Select(req, cands, seeded(1))
	if p := d.Candidates[1].Prediction; d.Worker != w(2) || p.Recompute != 0 {
		t.Fatalf("shared prefix: chose %v, worker 2 %+v, want worker 2 with no recompute price", d.Worker, p)
	}
	cands[0].DecodeBlocks = 42
	d, _ = newKVTime(t, cfg, nil).Select(req, cands, seeded(1))
	if p := d.Candidates[1].Prediction; d.Worker != w(2) || ms(p.Recompute) != 272.534 || ms(p.Total) != 356.505 {
		t.Fatalf("partly shared prefix: chose %v, worker 2 %+v, want worker 2 with recompute 272.534 ms", d.Worker, p)
	}
	// On a decode hop the prompt arrives by transfer: nothing recomputes.
	d, _ = newKVTime(t, cfg, nil).Select(Request{InputTokens: 4000, BlockSize: 64, Hop: HopDecode}, cands, seeded(1))
	for i, r := range d.Candidates {
		if r.Prediction.Recompute != 0 {
			t.Errorf("decode hop row %d recompute %v", i, r.Prediction.Recompute)
		}
	}
}

// onPrior feeds m one prefill sample exactly on the prior polynomial (so
// the fit stays the prior) at each of the given seconds.
func onPrior(m *timemodel.Model, secs ...int) {
	j := timemodel.Job{Uncached: 1000, Chunk: 8192}
	for _, s := range secs {
		ttft := time.Duration(priorSeconds(1000, 0, 8192) * float64(time.Second))
		m.ObservePrefill(j, ttft, time.Unix(int64(s), 0))
	}
}

// TestKVTimeLaterWorkedExample: one worker with 8,192 tokens booked and a
// 4,000-token uncached prompt; its model saw one request at 0, 15 and 30 s
// (half-life 15 s), so at 30 s its rate is (¼ + ½ + 1) × ln 2 / 15 =
// 0.080867 requests a second. Queue q = p(8,192) = 169.137 ms (one pass
// of 8,192, then one of 4,000), own prefill x = p(4,000) = 83.971 ms, and
// later = λ·x·(q + x/2) = 0.080867 × 0.083971 × 0.211123 = 1.434 ms. A
// second, idle worker that saw 40 requests (one a second up to 30 s) has
// λ = Σ 2^(−k/15), k = 0..39, × ln 2 / 15, and later = λ·x²/2 there.
func TestKVTimeLaterWorkedExample(t *testing.T) {
	busy, calm := timemodel.New(timemodel.DefaultConfig()), timemodel.New(timemodel.DefaultConfig())
	onPrior(calm, 0, 15, 30)
	var secs []int
	for s := -9; s <= 30; s++ {
		secs = append(secs, s)
	}
	onPrior(busy, secs...)
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight = 0
	s := newKVTime(t, cfg, models{w(1): calm, w(2): busy})
	now := time.Unix(30, 0)
	d, err := s.Select(Request{InputTokens: 4000, BlockSize: 64, Now: now},
		[]Candidate{{Worker: w(1), ActivePrefillTokens: 8192, MaxBatchedTokens: 8192}, {Worker: w(2), MaxBatchedTokens: 8192}}, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	p := d.Candidates[0].Prediction
	if math.Abs(p.Later-1.434e-3) > 1e-6 || math.Abs(p.Queue-0.169137) > 1e-6 || math.Abs(p.Total-(p.TTFT+p.Later)) > 1e-12 {
		t.Errorf("calm worker: %+v, want later 1.434 ms", p)
	}
	lambda := 0.0
	for k := range 40 {
		lambda += math.Exp2(-float64(k) / 15)
	}
	lambda *= math.Ln2 / 15
	x := 0.0839711624
	if p := d.Candidates[1].Prediction; math.Abs(p.Later-lambda*x*x/2) > 1e-8 {
		t.Errorf("busy worker: later %v, want %v (λ %v)", p.Later, lambda*x*x/2, lambda)
	}
	// Idle twins but for their rates: both in the band, the same prefix,
	// so the lower total wins: the worker that gets fewer requests.
	d, _ = s.Select(Request{InputTokens: 4000, BlockSize: 64, Now: now},
		[]Candidate{{Worker: w(2), MaxBatchedTokens: 8192}, {Worker: w(1), MaxBatchedTokens: 8192}}, seeded(1))
	if d.Worker != w(1) {
		t.Fatalf("chose %v, want the calmer worker 1: %+v", d.Worker, d.Candidates)
	}
}

// TestKVTimeCreditsElapsedPrefill: the worked example's worker 1 (30,000
// booked, 800 own) has been computing its queue for 0.2 s: its queue is
// 0.2 s shorter; after longer than the whole queue takes, it is empty and
// the request's own prefill is all that is left.
func TestKVTimeCreditsElapsedPrefill(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight, cfg.RecomputeWeight = 0, 0
	s := newKVTime(t, cfg, nil)
	queue := priorSeconds(30800, 0, 8192) - priorSeconds(800, 0, 8192)
	for _, c := range []struct {
		elapsed time.Duration
		want    float64
	}{{0, queue}, {200 * time.Millisecond, queue - 0.2}, {time.Minute, 0}} {
		cands := []Candidate{{Worker: w(1), Overlap: Overlap{Device: 50}, ActivePrefillTokens: 30000, PrefillElapsed: c.elapsed, MaxBatchedTokens: 8192}}
		d, err := s.Select(Request{InputTokens: 4000, BlockSize: 64}, cands, seeded(1))
		if err != nil {
			t.Fatal(err)
		}
		p := d.Candidates[0].Prediction
		if !near(p.Queue, c.want) || !near(p.Prefill, priorSeconds(800, 0, 8192)) || d.Candidates[0].PrefillElapsed != c.elapsed {
			t.Errorf("elapsed %v: queue %v prefill %v, want queue %v", c.elapsed, p.Queue, p.Prefill, c.want)
		}
	}
}

// TestKVTimeInterTokenTerm: TestKVTimeTiersAndDecode's candidate with the
// default weights, where 3 of its 10 running requests answer 2, 5 and 11
// tokens (ITLExposure 1/1 + 1/4 + 1/10 = 1.35): the prefill's stall s
// costs 0.1 × 10 × s of delay to the decodes and adds s/(n − 1) to each
// of those mean inter-token times, 1.35 × s in all, priced at 1. A
// second candidate, identical but serving only long answers (exposure
// 0.01), wins.
func TestKVTimeInterTokenTerm(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DiskBandwidth = 1e9
	s := newKVTime(t, cfg, nil)
	c := Candidate{Worker: w(1), Overlap: Overlap{Device: 2, Host: 3, Disk: 1}, ActiveRequests: 10, ActiveBlocks: 500, KVCapacityBlocks: 1000, MaxBatchedTokens: 8192,
		ITLExposure: 1.0/1 + 1.0/4 + 1.0/10}
	long := c
	long.Worker, long.ITLExposure = w(2), 0.01
	d, err := s.Select(Request{InputTokens: 1000, BlockSize: 100}, []Candidate{c, long}, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	load := 300*114688/64e9 + 100*114688/1e9
	stall := priorSeconds(400, 10, 8192) + load - timemodel.PriorDecodeMs(0.5)/1e3
	for i, exposure := range []float64{1.35, 0.01} {
		if p := d.Candidates[i].Prediction; !near(p.Decode, (0.1*10+exposure)*stall) {
			t.Errorf("row %d decode %v, want %v", i, p.Decode, (0.1*10+exposure)*stall)
		}
	}
	if d.Worker != w(2) {
		t.Errorf("chose %v, want the worker serving long answers", d.Worker)
	}
}

// TestKVTimeCreditsPrefixInFlight: a 4,000-token prompt (62 blocks of
// 64) whose first 31 blocks (1,984 tokens) a request running on worker 1
// is prefilling there: worker 1 has that request's 4,000 tokens booked
// and would add only 31 new blocks. Engines admit in order, so waiting
// for it costs one pass of 4,000 booked + 2,016 own tokens, p(6,016)
// (cold models: the mocker's polynomial), against computing all 4,000
// tokens at once behind the queue of the best other worker. Worker 2,
// with 8,000 tokens booked, takes p(8,192) + p(3,808): waiting wins, and
// worker 1's prediction is the credited one. With only 1,000 booked on
// worker 2 (one pass of 5,000, below p(6,016)), waiting is slower: no
// credit, worker 1 is priced as computing the whole prompt behind its
// queue (p(8,000)) and worker 2 wins. Without block tracking (no new
// blocks reported) nothing is known to be in flight.
func TestKVTimeCreditsPrefixInFlight(t *testing.T) {
	cfg := DefaultKVTimeConfig()
	cfg.DecodeWeight = 0
	s := newKVTime(t, cfg, nil)
	req := Request{InputTokens: 4000, BlockSize: 64}
	cands := []Candidate{
		{Worker: w(1), ActivePrefillTokens: 4000, ActiveBlocks: 62, DecodeBlocks: 62 + 31, MaxBatchedTokens: 8192},
		{Worker: w(2), ActivePrefillTokens: 8000, DecodeBlocks: 62, MaxBatchedTokens: 8192},
	}
	d, err := s.Select(req, cands, seeded(1))
	if err != nil {
		t.Fatal(err)
	}
	p1, p2 := d.Candidates[0].Prediction, d.Candidates[1].Prediction
	if !near(p1.Prefill, priorSeconds(2016, 0, 8192)) || !near(p1.TTFT, priorSeconds(6016, 0, 8192)) || p1.InFlight != 1984 || p2.InFlight != 0 {
		t.Errorf("worker 1 %+v, want prefill p(2,016) %v and TTFT p(6,016) %v", p1, priorSeconds(2016, 0, 8192), priorSeconds(6016, 0, 8192))
	}
	if want := priorSeconds(12000, 0, 8192); !near(p2.TTFT, want) || !near(p2.Prefill, priorSeconds(4000, 0, 8192)) {
		t.Errorf("worker 2 %+v, want TTFT %v", p2, want)
	}
	if d.Worker != w(1) {
		t.Fatalf("chose %v, want worker 1 (wait for the prefix in flight)", d.Worker)
	}
	cands[1].ActivePrefillTokens = 1000
	d, _ = s.Select(req, cands, seeded(1))
	p1, p2 = d.Candidates[0].Prediction, d.Candidates[1].Prediction
	if !near(p1.Prefill, priorSeconds(4000, 0, 8192)) || !near(p1.TTFT, priorSeconds(8000, 0, 8192)) || !near(p2.TTFT, priorSeconds(5000, 0, 8192)) || p1.InFlight != 0 {
		t.Errorf("no credit: worker 1 %+v, worker 2 %+v", p1, p2)
	}
	if d.Worker != w(2) {
		t.Fatalf("chose %v, want worker 2 (computing it all now is faster)", d.Worker)
	}
	cands[1].ActivePrefillTokens = 8000
	cands[0].DecodeBlocks, cands[0].ActiveBlocks = 0, 0
	d, _ = s.Select(req, cands, seeded(1))
	if p1 := d.Candidates[0].Prediction; !near(p1.Prefill, priorSeconds(4000, 0, 8192)) {
		t.Errorf("no block tracking: worker 1 %+v, want no credit", p1)
	}
}
