package timemodel

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config holds the fit's settings. The zero value is invalid; start from
// DefaultConfig.
type Config struct {
	// HalfLife is how long until a sample weighs half as much. Default
	// 15 s: a minute after a worker changes speed its older samples carry
	// 1/16 of their weight.
	HalfLife time.Duration
	// PriorWeight is the weight, in samples, of each of the three
	// pseudo-samples on the prior polynomial. Samples weigh by their
	// relative error, so against a worker s× slower than the prior the
	// pseudo-samples count s² times this. Default 0.1: a worker twice as
	// slow as the prior, sampled once a second, is predicted within 5 % of
	// its speed a minute after the change.
	PriorWeight float64
	// HuberK is the residual, in multiples of the robust scale, beyond
	// which a sample is down-weighted. Default 3.
	HuberK float64
	// MinScale floors the robust scale of relative residuals. Default 0.02.
	MinScale float64
	// DefaultChunkTokens is the tokens one pass computes (prefill chunks
	// and decodes) when the worker's max batched tokens is unknown.
	// Default 8192.
	DefaultChunkTokens int
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{HalfLife: 15 * time.Second, PriorWeight: 0.1, HuberK: 3, MinScale: 0.02, DefaultChunkTokens: 8192}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid time model config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.HalfLife <= 0:
		return fmt.Errorf("%w: half-life %v must be positive", ErrConfig, c.HalfLife)
	case !(c.PriorWeight > 0) || math.IsInf(c.PriorWeight, 0):
		return fmt.Errorf("%w: prior weight %v must be positive and finite", ErrConfig, c.PriorWeight)
	case !(c.HuberK > 0) || math.IsInf(c.HuberK, 0):
		return fmt.Errorf("%w: huber k %v must be positive and finite", ErrConfig, c.HuberK)
	case !(c.MinScale > 0) || math.IsInf(c.MinScale, 0):
		return fmt.Errorf("%w: min scale %v must be positive and finite", ErrConfig, c.MinScale)
	case c.DefaultChunkTokens <= 0:
		return fmt.Errorf("%w: default chunk %d must be positive", ErrConfig, c.DefaultChunkTokens)
	}
	return nil
}

// Job is the prefill work behind one request's first token on a worker:
// the prompt tokens booked ahead of it and its own uncached tokens,
// computed in passes of Chunk tokens shared with one token per running
// decode.
type Job struct {
	// Queued is the prefill tokens booked on the worker ahead of the
	// request; negative counts as 0.
	Queued int
	// Uncached is the request's prompt tokens not in the worker's cache;
	// at least one is always computed.
	Uncached int
	// Decodes is the running requests, one token of each pass apiece;
	// they take at most 7/8 of a pass.
	Decodes int
	// Chunk is the worker's max batched tokens per pass; 0 or less means
	// Config.DefaultChunkTokens.
	Chunk int
	// Elapsed is how long the worker has already been computing the
	// Queued tokens (since it last finished a prefill): that much of their
	// predicted time is behind it. It credits at most the Queued tokens'
	// share of the prediction, never the request's own prefill.
	Elapsed time.Duration
}

// Passes returns the job's forward passes: how many, the total tokens over
// them and the sum of each pass's tokens squared (the features that the
// per-pass polynomial's coefficients multiply).
func (j Job) Passes(defaultChunk int) (passes, tokens, tokensSq float64) {
	chunk := j.Chunk
	if chunk <= 0 {
		chunk = max(defaultChunk, 1)
	}
	dec := min(max(j.Decodes, 0), chunk-max(chunk/8, 1))
	per := float64(chunk - dec)
	total := float64(max(j.Queued, 0)) + float64(max(j.Uncached, 1))
	k := math.Ceil(total / per)
	last := total - (k-1)*per + float64(dec)
	full := per + float64(dec)
	return k, (k-1)*full + last, (k-1)*full*full + last*last
}

// prefillFeatures scales Passes to kilotokens, keeping the normal
// equations well conditioned.
func prefillFeatures(j Job, defaultChunk int) vec {
	k, n, n2 := j.Passes(defaultChunk)
	return vec{k, n / 1e3, n2 / 1e6}
}

func fromPrefill(p Poly) vec { return vec{p.A, p.B * 1e3, p.C * 1e6} }
func toPrefill(v vec) Poly   { return Poly{A: v[0], B: v[1] / 1e3, C: v[2] / 1e6} }
func decodeFeatures(u float64) vec {
	u = clamp01(u)
	return vec{1, u, u * u}
}

// Model is one worker rank's time model. It is not safe for concurrent
// use; its size is fixed whatever it observes.
type Model struct {
	cfg            Config
	prefill        fit
	decode         fit
	pPrior, dPrior prior
	residence      mean
	requests       rate
	prefillN       uint64
	decodeN        uint64
}

// New returns a model at the prior. cfg must be valid (see Validate);
// an invalid one is replaced by DefaultConfig.
func New(cfg Config) *Model {
	if cfg.Validate() != nil {
		cfg = DefaultConfig()
	}
	m := &Model{cfg: cfg}
	pts := []vec{
		prefillFeatures(Job{Uncached: 128}, cfg.DefaultChunkTokens),
		prefillFeatures(Job{Uncached: 2048}, cfg.DefaultChunkTokens),
		prefillFeatures(Job{Uncached: 8192}, cfg.DefaultChunkTokens),
	}
	m.pPrior = newPrior(fromPrefill(PriorPrefill), pts, cfg.PriorWeight)
	m.dPrior = newPrior(vec{PriorDecode.A, PriorDecode.B, PriorDecode.C},
		[]vec{decodeFeatures(0.05), decodeFeatures(0.5), decodeFeatures(0.95)}, cfg.PriorWeight)
	return m
}

// Config returns the model's settings.
func (m *Model) Config() Config { return m.cfg }

// ObservePrefill folds in one time to first token of a job observed at
// now, and counts one request served by the worker (RequestRate). It
// returns the weight the sample got (0 if rejected: a non-positive or
// non-finite time, which counts no request).
//
// A job with Elapsed is fitted as the passes of its whole booked queue
// taking ttft plus the credit PrefillSeconds takes off them (at the
// current fit), so that the polynomial stays the cost of whole passes.
func (m *Model) ObservePrefill(j Job, ttft time.Duration, now time.Time) float64 {
	y := ms(ttft)
	if ttft > 0 {
		y += m.credit(j) * 1e3
	}
	w := m.prefill.observe(&m.cfg, &m.pPrior, prefillFeatures(j, m.cfg.DefaultChunkTokens), y, now)
	if w > 0 {
		m.prefillN++
		m.requests.add(&m.cfg, now)
	}
	return w
}

// CountRequest counts one request served by the worker at now whose time
// to first token was not seen (a response that was not streamed), so
// that RequestRate covers every request the worker served, not only the
// streamed ones ObservePrefill counts.
func (m *Model) CountRequest(now time.Time) { m.requests.add(&m.cfg, now) }

// RequestRate is the worker's decayed request rate at now, in requests
// per second: the prefill samples of the last half-lives, each weighing
// 2^(−age/half-life), times ln 2 / half-life (so a steady λ per second
// reads λ once the worker has been observed for a few half-lives; it
// starts from 0). The zero time or a time before the last sample reads
// the rate at that sample.
func (m *Model) RequestRate(now time.Time) float64 { return m.requests.perSecond(&m.cfg, now) }

// ObserveDecode folds in one inter-token time observed at KV use fraction
// u (clamped to [0, 1]) at now. It returns the weight the sample got.
func (m *Model) ObserveDecode(u float64, itl time.Duration, now time.Time) float64 {
	if math.IsNaN(u) {
		return 0
	}
	w := m.decode.observe(&m.cfg, &m.dPrior, decodeFeatures(u), ms(itl), now)
	if w > 0 {
		m.decodeN++
	}
	return w
}

// ObserveResidence folds in how long one request held its KV blocks on
// the worker (sent to last token), observed at now. Non-positive or
// non-finite durations are ignored; it returns whether it was kept.
func (m *Model) ObserveResidence(d time.Duration, now time.Time) bool {
	if d <= 0 {
		return false
	}
	m.residence.add(&m.cfg, d.Seconds(), now)
	return true
}

// ResidenceSeconds is the decayed mean time a request holds its blocks,
// false before any sample.
func (m *Model) ResidenceSeconds() (float64, bool) { return m.residence.value() }

// Relax decays the fits to now without a sample (at most once per eighth
// of a half-life), so that a worker the router stopped sending to drifts
// back toward the prior instead of keeping a stale fit forever.
func (m *Model) Relax(now time.Time) {
	m.prefill.relax(&m.cfg, &m.pPrior, now)
	m.decode.relax(&m.cfg, &m.dPrior, now)
}

// PrefillSeconds predicts the job's time to first token in seconds (≥ 0):
// the passes over its queued and own tokens, less the time already spent
// on the queued ones (Job.Elapsed, at most their share).
func (m *Model) PrefillSeconds(j Job) float64 {
	return math.Max(m.passSeconds(j)-m.credit(j), 0)
}

// passSeconds is the fit's time for the job's passes in seconds (≥ 0),
// Elapsed ignored.
func (m *Model) passSeconds(j Job) float64 {
	return math.Max(m.prefill.predict(&m.pPrior, prefillFeatures(j, m.cfg.DefaultChunkTokens)), 0) / 1e3
}

// credit is the seconds of the job's passes already behind the worker:
// Elapsed, at most the queued tokens' share of the prediction (the passes
// with them less the passes without them).
func (m *Model) credit(j Job) float64 {
	if j.Elapsed <= 0 || j.Queued <= 0 {
		return 0
	}
	own := j
	own.Queued, own.Elapsed = 0, 0
	return math.Min(j.Elapsed.Seconds(), math.Max(m.passSeconds(j)-m.passSeconds(own), 0))
}

// DecodeStepSeconds predicts one decode step's time in seconds at KV use
// fraction u (≥ 0).
func (m *Model) DecodeStepSeconds(u float64) float64 {
	return math.Max(m.decode.predict(&m.dPrior, decodeFeatures(u)), 0) / 1e3
}

// PrefillError is the prefill fit's typical relative error: the decayed
// mean absolute relative residual of its samples (with one pseudo-sample
// at 0.1, at least Config.MinScale).
func (m *Model) PrefillError() float64 { return m.prefill.scaleOf(&m.cfg) }

// Prefill returns the current per-pass prefill polynomial (milliseconds
// over tokens).
func (m *Model) Prefill() Poly {
	if !m.prefill.ok {
		return PriorPrefill
	}
	return toPrefill(m.prefill.coef)
}

// Decode returns the current decode-step polynomial (milliseconds over KV
// use fraction).
func (m *Model) Decode() Poly {
	if !m.decode.ok {
		return PriorDecode
	}
	c := m.decode.coef
	return Poly{A: c[0], B: c[1], C: c[2]}
}

// Samples returns how many prefill and decode samples the model accepted
// over its life.
func (m *Model) Samples() (prefill, decode uint64) { return m.prefillN, m.decodeN }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
