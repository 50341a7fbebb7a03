package workload

import (
	"fmt"
	"math"
)

// PrefixRatioConfig is Dynamo's prefix-ratio benchmark
// (benchmarks/router/prefix_ratio_benchmark.py driving AIPerf): a pool of
// NumPrefixPrompts shared prefixes of int(ISL·PrefixRatio) tokens; each
// request picks one uniformly and appends a unique user part whose length is
// ceil(x), x ~ Normal(int(ISL·(1−r)), round(that/4)) redrawn until x ≥ 0.
// Requests run closed loop at Concurrency.
type PrefixRatioConfig struct {
	// ISL is the target input length in tokens. Default 14000.
	ISL int
	// OSL is the mean output length in tokens (standard deviation
	// round(OSL/4), rounded, redrawn until ≥ 1). Default 200.
	OSL int
	// Requests is the number of requests. Default 200.
	Requests int
	// Concurrency is the number of requests kept in flight. Default 20.
	Concurrency int
	// NumPrefixPrompts is the size of the shared prefix pool. Default 20.
	NumPrefixPrompts int
	// PrefixRatio is the shared fraction of ISL, in [0, 1]. Default 0.5
	// (the README's; the script sweeps DefaultPrefixRatios).
	PrefixRatio float64
	// Seed drives every draw. Default 0 (the script uses 0, 1, 2… per ratio).
	Seed uint64
}

// DefaultPrefixRatios is the script's default sweep.
var DefaultPrefixRatios = []float64{0.1, 0.3, 0.5, 0.7, 0.9}

// DefaultPrefixRatioConfig returns the script's defaults at ratio 0.5.
func DefaultPrefixRatioConfig() PrefixRatioConfig {
	return PrefixRatioConfig{ISL: 14000, OSL: 200, Requests: 200, Concurrency: 20, NumPrefixPrompts: 20, PrefixRatio: 0.5}
}

// PrefixRatioSweep returns one configuration per ratio, based on base, with
// the seed increasing by one per ratio from base.Seed as the script does.
func PrefixRatioSweep(base PrefixRatioConfig, ratios []float64) []PrefixRatioConfig {
	out := make([]PrefixRatioConfig, len(ratios))
	for i, r := range ratios {
		out[i] = base
		out[i].PrefixRatio = r
		out[i].Seed = base.Seed + uint64(i)
	}
	return out
}

// Validate reports the first invalid field.
func (c PrefixRatioConfig) Validate() error {
	switch {
	case c.ISL < 1:
		return fmt.Errorf("%w: isl %d must be positive", ErrConfig, c.ISL)
	case c.OSL < 1:
		return fmt.Errorf("%w: osl %d must be positive", ErrConfig, c.OSL)
	case c.Requests < 0:
		return fmt.Errorf("%w: requests %d must not be negative", ErrConfig, c.Requests)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: concurrency %d must be positive", ErrConfig, c.Concurrency)
	case c.NumPrefixPrompts < 1:
		return fmt.Errorf("%w: num prefix prompts %d must be positive", ErrConfig, c.NumPrefixPrompts)
	case !(c.PrefixRatio >= 0 && c.PrefixRatio <= 1):
		return fmt.Errorf("%w: prefix ratio %v must be in [0, 1]", ErrConfig, c.PrefixRatio)
	}
	return nil
}

// PrefixRatio is the closed-loop source of PrefixRatioConfig.
type PrefixRatio struct {
	cfg       PrefixRatioConfig
	prefixLen int
	groups    []int // prefix index per request
	userLens  []int
	outLens   []int
	next      int
}

var _ Source = (*PrefixRatio)(nil)

// NewPrefixRatio draws the whole request plan (lengths and prefix choices)
// up front; prompts are built in Next.
func NewPrefixRatio(cfg PrefixRatioConfig) (*PrefixRatio, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &PrefixRatio{cfg: cfg, prefixLen: int(float64(cfg.ISL) * cfg.PrefixRatio)}
	userMean := int(float64(cfg.ISL) * (1 - cfg.PrefixRatio))
	userSD := math.Round(float64(userMean) / 4)
	oslSD := math.Round(float64(cfg.OSL) / 4)
	r := newRand(cfg.Seed)
	for range cfg.Requests {
		p.groups = append(p.groups, r.IntN(cfg.NumPrefixPrompts))
		p.userLens = append(p.userLens, normalCeil(r, float64(userMean), userSD))
		out := 0
		for out < 1 {
			out = int(math.Round(r.NormFloat64()*oslSD + float64(cfg.OSL)))
		}
		p.outLens = append(p.outLens, out)
	}
	return p, nil
}

// PrefixLen returns the shared prefix length in tokens.
func (p *PrefixRatio) PrefixLen() int { return p.prefixLen }

// Next implements Source. Request.Group is the prefix index plus one.
func (p *PrefixRatio) Next() (Request, bool) {
	i := p.next
	if i >= len(p.groups) {
		return Request{}, false
	}
	p.next++
	g := p.groups[i]
	prompt := make([]uint32, 0, p.prefixLen+p.userLens[i])
	prompt = appendStream(prompt, streamID(p.cfg.Seed, kindPrefix, uint64(g), 0), 0, p.prefixLen)
	prompt = appendStream(prompt, streamID(p.cfg.Seed, kindUser, uint64(i), 0), 0, p.userLens[i])
	return Request{ID: i, Prompt: prompt, OutputLen: p.outLens[i], Group: g + 1}, true
}

// Len implements Source.
func (p *PrefixRatio) Len() int { return len(p.groups) }

// Concurrency implements Source: closed loop.
func (p *PrefixRatio) Concurrency() int { return p.cfg.Concurrency }
