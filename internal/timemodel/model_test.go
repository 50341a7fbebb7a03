package timemodel

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Unix(1_000_000, 0)

// naivePasses walks the passes one by one: each pass computes one token
// per decode (at most 7/8 of the chunk) and fills the rest with prefill.
func naivePasses(j Job, defaultChunk int) []float64 {
	chunk := j.Chunk
	if chunk <= 0 {
		chunk = defaultChunk
	}
	dec := j.Decodes
	if dec < 0 {
		dec = 0
	}
	if lim := chunk - max(chunk/8, 1); dec > lim {
		dec = lim
	}
	left := max(j.Queued, 0) + max(j.Uncached, 1)
	var out []float64
	for left > 0 {
		n := min(left, chunk-dec)
		out = append(out, float64(n+dec))
		left -= n
	}
	return out
}

func priorJobMs(j Job) float64 {
	s := 0.0
	for _, n := range naivePasses(j, 8192) {
		s += PriorPrefillMs(int(n))
	}
	return s
}

func TestColdModelIsThePrior(t *testing.T) {
	m := New(DefaultConfig())
	// One pass: the mocker's polynomial itself.
	if got, want := m.PrefillSeconds(Job{Uncached: 1000}), (4.209989e-7*1e6+1.518344e-2*1000+16.50142)/1e3; math.Abs(got-want) > 1e-12 {
		t.Fatalf("1000 tokens: %v s, want %v", got, want)
	}
	// 10,000 queued + 2,000 own with 100 decodes in chunks of 8,192: a
	// full pass of 8,192 and a last one of 12,000 − 8,092 + 100 = 4,008.
	j := Job{Queued: 10000, Uncached: 2000, Decodes: 100, Chunk: 8192}
	if got, want := m.PrefillSeconds(j), (PriorPrefillMs(8192)+PriorPrefillMs(4008))/1e3; math.Abs(got-want) > 1e-12 {
		t.Fatalf("queued job: %v s, want %v", got, want)
	}
	if got, want := m.DecodeStepSeconds(0.5), (-25.74*0.25+54.01*0.5+5.74)/1e3; math.Abs(got-want) > 1e-12 {
		t.Fatalf("decode at 0.5: %v, want %v", got, want)
	}
	if m.Prefill() != PriorPrefill || m.Decode() != PriorDecode {
		t.Fatal("cold coefficients are not the prior's")
	}
	// No residual yet: the error is the prior pseudo-sample's 0.1. After a
	// minute of exact samples it is about 0.1 / 22 (22 decayed samples
	// with residual 0 and the pseudo-sample), floored at MinScale 0.02.
	if e := m.PrefillError(); e != 0.1 {
		t.Fatalf("cold error %v", e)
	}
	steady(m, 1, 0, 60)
	if e := m.PrefillError(); e != DefaultConfig().MinScale {
		t.Fatalf("error after exact samples %v, want the floor", e)
	}
}

func TestPassesMatchNaiveWalk(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		j := Job{
			Queued:   rapid.IntRange(-10, 100000).Draw(rt, "queued"),
			Uncached: rapid.IntRange(-10, 50000).Draw(rt, "uncached"),
			Decodes:  rapid.IntRange(-5, 20000).Draw(rt, "decodes"),
			Chunk:    rapid.IntRange(-1, 16384).Draw(rt, "chunk"),
		}
		ps := naivePasses(j, 8192)
		var n, n2 float64
		for _, p := range ps {
			n += p
			n2 += p * p
		}
		k, gn, gn2 := j.Passes(8192)
		if k != float64(len(ps)) || math.Abs(gn-n) > 1e-9*n || math.Abs(gn2-n2) > 1e-9*n2 {
			rt.Fatalf("%+v: passes (%v, %v, %v), walk (%d, %v, %v)", j, k, gn, gn2, len(ps), n, n2)
		}
	})
}

// det3 and cramer solve a 3×3 system by Cramer's rule, independently of
// the model's elimination.
func det3(m [3][3]float64) float64 {
	return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) -
		m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) +
		m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
}

func cramer(a [3][3]float64, b [3]float64) [3]float64 {
	d := det3(a)
	var x [3]float64
	for c := range 3 {
		m := a
		for r := range 3 {
			m[r][c] = b[r]
		}
		x[c] = det3(m) / d
	}
	return x
}

// batchFit is the naive model: weighted least squares over every sample
// at once, each with the weight the online model reported times its decay
// to now, plus the prior's pseudo-samples.
type batchFit struct {
	phis [][3]float64
	ys   []float64
	ws   []float64
	ts   []time.Time
}

func (b *batchFit) solve(now time.Time, halfLife time.Duration, prior Poly, priorWeight float64) [3]float64 {
	var a [3][3]float64
	var v [3]float64
	add := func(phi [3]float64, y, w float64) {
		for i := range 3 {
			for j := range 3 {
				a[i][j] += w * phi[i] * phi[j]
			}
			v[i] += w * phi[i] * y
		}
	}
	for i := range b.phis {
		add(b.phis[i], b.ys[i], b.ws[i]*math.Pow(0.5, now.Sub(b.ts[i]).Seconds()/halfLife.Seconds()))
	}
	for _, n := range []int{128, 2048, 8192} {
		phi := [3]float64{1, float64(n) / 1e3, float64(n) * float64(n) / 1e6}
		y := PriorPrefillMs(n)
		add(phi, y, priorWeight/(y*y))
	}
	_ = prior
	return cramer(a, v)
}

func jobFeatures(j Job) [3]float64 {
	var f [3]float64
	for _, n := range naivePasses(j, 8192) {
		f[0]++
		f[1] += n / 1e3
		f[2] += n * n / 1e6
	}
	return f
}

func drawJob(rt *rapid.T, label string) Job {
	return Job{
		Queued:   rapid.IntRange(0, 40000).Draw(rt, label+"q"),
		Uncached: rapid.IntRange(1, 20000).Draw(rt, label+"u"),
		Decodes:  rapid.IntRange(0, 300).Draw(rt, label+"d"),
		Chunk:    8192,
	}
}

// TestMatchesBatchLeastSquares feeds random samples (a worker at a random
// speed with noise and the odd outlier, at random instants) and checks the
// online model's predictions against the batch fit over the same samples.
func TestMatchesBatchLeastSquares(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.HalfLife = time.Duration(rapid.IntRange(1, 120).Draw(rt, "halflife")) * time.Second
		m := New(cfg)
		speed := rapid.Float64Range(0.25, 4).Draw(rt, "speed")
		var b batchFit
		now := t0
		for i := range rapid.IntRange(0, 60).Draw(rt, "n") {
			now = now.Add(time.Duration(rapid.IntRange(0, 5000).Draw(rt, "dt")) * time.Millisecond)
			j := drawJob(rt, "s")
			y := priorJobMs(j) / speed * rapid.Float64Range(0.8, 1.25).Draw(rt, "noise")
			if rapid.IntRange(0, 9).Draw(rt, "outlier") == 0 {
				y *= 30
			}
			w := m.ObservePrefill(j, time.Duration(y*float64(time.Millisecond)), now)
			if w <= 0 {
				rt.Fatalf("sample %d rejected", i)
			}
			b.phis = append(b.phis, jobFeatures(j))
			// The duration is rounded to the nanosecond.
			b.ys = append(b.ys, float64(time.Duration(y*float64(time.Millisecond)))/1e6)
			b.ws = append(b.ws, w)
			b.ts = append(b.ts, now)
		}
		coef := b.solve(now, cfg.HalfLife, PriorPrefill, cfg.PriorWeight)
		for range 5 {
			j := drawJob(rt, "q")
			phi := jobFeatures(j)
			want := math.Max(coef[0]*phi[0]+coef[1]*phi[1]+coef[2]*phi[2], 0) / 1e3
			if got := m.PrefillSeconds(j); math.Abs(got-want) > 1e-3*math.Max(want, 1e-3) {
				rt.Fatalf("job %+v: online %v s, batch %v s", j, got, want)
			}
		}
	})
}

// steady feeds one sample a second (cycling job sizes) from a worker
// running at speed × the prior, from..to seconds after t0.
func steady(m *Model, speed float64, from, to int) {
	jobs := []Job{{Uncached: 300}, {Queued: 4000, Uncached: 1500, Decodes: 40}, {Uncached: 6000, Decodes: 80}, {Queued: 20000, Uncached: 3000, Decodes: 120}}
	for s := from; s < to; s++ {
		j := jobs[s%len(jobs)]
		m.ObservePrefill(j, time.Duration(priorJobMs(j)/speed*float64(time.Millisecond)), t0.Add(time.Duration(s)*time.Second))
	}
}

// TestSlowdownNoticedWithinAMinute: a worker runs at the prior's speed for
// two minutes, then twice as slow. A minute later the model predicts
// within 10 % of twice the prior for a job it has seen and one it has not.
func TestSlowdownNoticedWithinAMinute(t *testing.T) {
	m := New(DefaultConfig())
	steady(m, 1, 0, 120)
	probe := []Job{{Queued: 4000, Uncached: 1500, Decodes: 40}, {Queued: 9000, Uncached: 500, Decodes: 10}}
	for _, j := range probe {
		if r := m.PrefillSeconds(j) * 1e3 / priorJobMs(j); math.Abs(r-1) > 0.02 {
			t.Fatalf("before: %+v predicted %.3f × prior", j, r)
		}
	}
	steady(m, 0.5, 120, 150)
	half := m.PrefillSeconds(probe[0]) * 1e3 / priorJobMs(probe[0])
	steady(m, 0.5, 150, 180)
	for _, j := range probe {
		if r := m.PrefillSeconds(j) * 1e3 / priorJobMs(j); r < 1.8 || r > 2.2 {
			t.Fatalf("60 s after slowing 2×: %+v predicted %.3f × prior (30 s after: %.3f)", j, r, half)
		}
	}
	if half < 1.3 {
		t.Errorf("30 s after slowing 2×: predicted only %.3f × prior", half)
	}
}

// TestOutliersResisted: one sample 50× too slow among steady ones moves
// the prediction by under 5 %, where the same fit without the Huber weight
// (every sample weighted 1/ŷ²) moves by more than 100 %.
func TestOutliersResisted(t *testing.T) {
	m := New(DefaultConfig())
	steady(m, 1, 0, 60)
	j := Job{Queued: 4000, Uncached: 1500, Decodes: 40}
	before := m.PrefillSeconds(j)
	w := m.ObservePrefill(j, time.Duration(50*priorJobMs(j)*float64(time.Millisecond)), t0.Add(60*time.Second))
	after := m.PrefillSeconds(j)
	if math.Abs(after/before-1) > 0.05 {
		t.Fatalf("one 50× outlier moved the prediction %.3f → %.3f s", before, after)
	}
	// Unweighted, the outlier's relative residual 49 would weigh like any
	// sample: its share of the ≈ 22 decayed samples drags the fit by
	// 49/22 ≈ 2.2 × the prediction. The model gave it far less than one
	// sample's weight 1/ŷ².
	if yhat := before * 1e3; w*yhat*yhat > 0.1 {
		t.Fatalf("outlier weight %.3f samples, want ≤ 0.1", w*yhat*yhat)
	}
}

func TestDecodeLearnsSlowerSteps(t *testing.T) {
	m := New(DefaultConfig())
	for s := range 120 {
		u := float64(s%10) / 10
		m.ObserveDecode(u, time.Duration(2*PriorDecodeMs(u)*float64(time.Millisecond)), t0.Add(time.Duration(s)*time.Second))
	}
	for _, u := range []float64{0.1, 0.45, 0.85} {
		if r := m.DecodeStepSeconds(u) * 1e3 / PriorDecodeMs(u); math.Abs(r-2) > 0.1 {
			t.Errorf("u=%v: predicted %.3f × prior, want 2", u, r)
		}
	}
	if _, d := m.Samples(); d != 120 {
		t.Errorf("decode samples %d, want 120", d)
	}
}

func TestHostileSamples(t *testing.T) {
	m := New(DefaultConfig())
	j := Job{Uncached: 100}
	for _, d := range []time.Duration{0, -time.Second} {
		if w := m.ObservePrefill(j, d, t0); w != 0 {
			t.Errorf("ttft %v accepted with weight %v", d, w)
		}
	}
	if w := m.ObserveDecode(math.NaN(), time.Millisecond, t0); w != 0 {
		t.Errorf("NaN use accepted")
	}
	// Extreme but finite values are accepted and leave finite predictions;
	// the clock stepping back does not break the decay.
	m.ObservePrefill(Job{Queued: math.MaxInt, Uncached: math.MaxInt, Decodes: math.MaxInt, Chunk: 1}, time.Duration(math.MaxInt64), t0)
	m.ObservePrefill(Job{Queued: -5, Uncached: -5, Decodes: -5, Chunk: -5}, time.Nanosecond, t0.Add(-time.Hour))
	m.ObserveDecode(math.Inf(1), time.Hour, t0)
	for _, v := range []float64{m.PrefillSeconds(j), m.PrefillSeconds(Job{Queued: 1 << 40}), m.DecodeStepSeconds(0.3)} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("prediction %v after hostile samples", v)
		}
	}
	if err := (Config{}).Validate(); err == nil {
		t.Fatal("zero config validated")
	}
	if New(Config{}).Config() != DefaultConfig() {
		t.Fatal("invalid config not replaced by the default")
	}
}

// TestRelaxDriftsBackToThePrior: a worker seen at half the prior's speed
// for a minute and then not at all is predicted within 10 % of the prior
// two minutes later (eight half-lives: the samples weigh 1/256), and
// relaxing without time passing changes nothing.
func TestRelaxDriftsBackToThePrior(t *testing.T) {
	m := New(DefaultConfig())
	steady(m, 0.5, 0, 60)
	j := Job{Queued: 4000, Uncached: 1500, Decodes: 40}
	before := m.PrefillSeconds(j)
	m.Relax(t0.Add(59 * time.Second))
	if m.PrefillSeconds(j) != before {
		t.Fatal("relaxing at the last sample's time moved the fit")
	}
	if r := before * 1e3 / priorJobMs(j); r < 1.8 {
		t.Fatalf("after a minute at half speed: %.3f × the prior", r)
	}
	m.Relax(t0.Add(179 * time.Second))
	if r := m.PrefillSeconds(j) * 1e3 / priorJobMs(j); math.Abs(r-1) > 0.1 {
		t.Fatalf("two idle minutes later: %.3f × the prior", r)
	}
}

func TestResidenceMean(t *testing.T) {
	m := New(DefaultConfig())
	if _, ok := m.ResidenceSeconds(); ok {
		t.Fatal("residence known before any sample")
	}
	// 2 s, then 15 s (one half-life) later 6 s: (2·½ + 6) / (½ + 1) = 4.667.
	m.ObserveResidence(2*time.Second, t0)
	m.ObserveResidence(6*time.Second, t0.Add(15*time.Second))
	if m.ObserveResidence(-time.Second, t0) {
		t.Fatal("negative residence kept")
	}
	if got, ok := m.ResidenceSeconds(); !ok || math.Abs(got-7.0/1.5) > 1e-9 {
		t.Fatalf("residence %v, want %v", got, 7.0/1.5)
	}
}

// TestRequestRate: with a 10 s half-life, accepted samples at 0, 10 and
// 20 s read (¼ + ½ + 1) × ln 2 / 10 = 0.121301 requests a second at 20 s
// (and at the zero time, or before the last sample), half that at 30 s;
// a rejected sample counts nothing. One request a second for 200 s reads
// Σ 2^(−k/10) × ln 2 / 10 ≈ 1.035 (a discrete sum over-counts a steady
// rate by about half a sample per half-life's worth).
func TestRequestRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HalfLife = 10 * time.Second
	m := New(cfg)
	if r := m.RequestRate(t0); r != 0 {
		t.Fatalf("cold rate %v", r)
	}
	j := Job{Uncached: 500}
	for _, s := range []int{0, 10, 20} {
		if m.ObservePrefill(j, 50*time.Millisecond, t0.Add(time.Duration(s)*time.Second)) <= 0 {
			t.Fatal("sample rejected")
		}
	}
	m.ObservePrefill(j, 0, t0.Add(20*time.Second))
	want := 1.75 * math.Ln2 / 10
	for _, c := range []struct {
		at   time.Time
		want float64
	}{{t0.Add(20 * time.Second), want}, {time.Time{}, want}, {t0.Add(5 * time.Second), want}, {t0.Add(30 * time.Second), want / 2}} {
		if got := m.RequestRate(c.at); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("rate at %v = %v, want %v", c.at, got, c.want)
		}
	}
	if math.Abs(want-0.121301) > 1e-6 {
		t.Fatalf("worked value %v", want)
	}
	m = New(cfg)
	for s := range 201 {
		m.ObservePrefill(j, 50*time.Millisecond, t0.Add(time.Duration(s)*time.Second))
	}
	if got := m.RequestRate(t0.Add(200 * time.Second)); math.Abs(got-1.035) > 0.001 {
		t.Fatalf("steady 1/s reads %v, want 1.035", got)
	}
}

// TestCountRequest: requests counted without a TTFT read the same rate as
// the worked example of TestRequestRate ((¼ + ½ + 1) × ln 2 / 10 at 20 s
// with a 10 s half-life) and leave the prefill fit without samples.
func TestCountRequest(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HalfLife = 10 * time.Second
	m := New(cfg)
	for _, s := range []int{0, 10, 20} {
		m.CountRequest(t0.Add(time.Duration(s) * time.Second))
	}
	if got, want := m.RequestRate(t0.Add(20*time.Second)), 1.75*math.Ln2/10; math.Abs(got-want) > 1e-12 {
		t.Fatalf("rate %v, want %v", got, want)
	}
	if p, _ := m.Samples(); p != 0 {
		t.Fatalf("%d prefill samples from counted requests", p)
	}
}

// TestElapsedCreditsTheQueue: a job whose queued prefill has been
// computing for Elapsed is predicted that much sooner, but never sooner
// than its own prefill alone (the worked example of
// TestColdModelIsThePrior: 8,192 + 4,008 tokens in two passes, own
// 2,000 + 100 decodes in one).
func TestElapsedCreditsTheQueue(t *testing.T) {
	m := New(DefaultConfig())
	j := Job{Queued: 10000, Uncached: 2000, Decodes: 100, Chunk: 8192, Elapsed: 100 * time.Millisecond}
	if got, want := m.PrefillSeconds(j), (PriorPrefillMs(8192)+PriorPrefillMs(4008))/1e3-0.1; math.Abs(got-want) > 1e-12 {
		t.Fatalf("100 ms elapsed: %v s, want %v", got, want)
	}
	j.Elapsed = time.Hour
	if got, want := m.PrefillSeconds(j), PriorPrefillMs(2100)/1e3; math.Abs(got-want) > 1e-12 {
		t.Fatalf("an hour elapsed: %v s, want the own prefill's %v", got, want)
	}
	j.Queued = 0
	if got, want := m.PrefillSeconds(j), PriorPrefillMs(2100)/1e3; math.Abs(got-want) > 1e-12 {
		t.Fatalf("elapsed with nothing queued: %v s, want %v", got, want)
	}
}

// TestElapsedSamplesFitTheWorker: a worker 1.5× slower than the prior
// serves requests behind booked prefill it has partly computed (a
// quarter to three quarters of the queue's time already behind it). Fed
// the elapsed time with each sample, the model learns the worker's speed
// (within 5 % on a queued job and a job alone); fed the same samples
// without it, the polynomial bends to explain queues that took less than
// their passes, and the lone job is predicted over 10 % off (28 % high
// here), which shows the credit is applied when fitting.
func TestElapsedSamplesFitTheWorker(t *testing.T) {
	const slow = 1.5
	jobs := []Job{{Uncached: 300}, {Queued: 6000, Uncached: 1500, Decodes: 40}, {Uncached: 6000, Decodes: 80}, {Queued: 20000, Uncached: 3000, Decodes: 120}}
	fitted := func(credit bool) *Model {
		m := New(DefaultConfig())
		for s := range 240 {
			j := jobs[s%len(jobs)]
			own := j
			own.Queued = 0
			queueMs := (priorJobMs(j) - priorJobMs(own)) * slow
			done := queueMs * (0.25 + 0.5*float64(s%7)/6)
			ttft := priorJobMs(j)*slow - done
			if credit {
				j.Elapsed = time.Duration(done * float64(time.Millisecond))
			}
			m.ObservePrefill(j, time.Duration(ttft*float64(time.Millisecond)), t0.Add(time.Duration(s)*time.Second))
		}
		return m
	}
	m := fitted(true)
	alone := Job{Uncached: 4000, Decodes: 20}
	queued := Job{Queued: 12000, Uncached: 2000, Decodes: 60, Elapsed: 50 * time.Millisecond}
	own := queued
	own.Queued, own.Elapsed = 0, 0
	wantQueued := priorJobMs(Job{Queued: 12000, Uncached: 2000, Decodes: 60})*slow/1e3 - 0.05
	for _, c := range []struct {
		j    Job
		want float64
	}{{alone, priorJobMs(alone) * slow / 1e3}, {queued, wantQueued}} {
		if r := m.PrefillSeconds(c.j) / c.want; math.Abs(r-1) > 0.05 {
			t.Errorf("%+v: predicted %.4f s, want %.4f (×%.3f)", c.j, m.PrefillSeconds(c.j), c.want, r)
		}
	}
	if r := fitted(false).PrefillSeconds(alone) / (priorJobMs(alone) * slow / 1e3); math.Abs(r-1) < 0.1 {
		t.Errorf("without the elapsed credit the lone job is predicted at %.3f × its time; the test no longer shows the credit matters", r)
	}
}
