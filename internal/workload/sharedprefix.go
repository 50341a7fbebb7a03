package workload

import (
	"fmt"
	"math"
	"time"
)

// SharedPrefixConfig is SGLang's bench_serving generated-shared-prefix
// dataset (--dataset-name generated-shared-prefix, flags --gsp-*): NumGroups
// system prompts, each followed by PromptsPerGroup distinct questions, every
// group exactly equally popular. Lengths L are drawn uniformly from
// [max(1, int(L·RangeRatio)), L]: one system length per group, one question
// length per (group, prompt), one output length per (group, prompt). Rows
// are shuffled unless Ordered; arrivals are Poisson at RequestRate.
type SharedPrefixConfig struct {
	// NumGroups is the number of distinct system prompts. Default 64.
	NumGroups int
	// PromptsPerGroup is the number of questions per system prompt. Default 16.
	PromptsPerGroup int
	// SystemPromptLen is the system prompt length in tokens. Default 2048.
	SystemPromptLen int
	// QuestionLen is the question length in tokens. Default 128.
	QuestionLen int
	// OutputLen is the output length in tokens. Default 256.
	OutputLen int
	// RangeRatio is the lower bound of each length as a fraction of it, in
	// (0, 1]; 1 fixes every length. Default 1.0.
	RangeRatio float64
	// NumTurns must be 1: SGLang's multi-turn variant sends each turn after
	// the previous answer, which is what MultiTurnConfig models. Default 1.
	NumTurns int
	// Ordered keeps rows grouped (group 0's prompts, then group 1's…)
	// instead of shuffling them. Default false.
	Ordered bool
	// Seed drives every draw. Default 1.
	Seed uint64
	// RequestRate is the mean arrival rate in requests per second (Poisson,
	// first request at 0); +Inf sends every request at time 0. Default +Inf.
	RequestRate float64
	// MaxConcurrency caps the requests in flight; 0 means no cap. Default 0.
	MaxConcurrency int
}

// DefaultSharedPrefixConfig returns SGLang's defaults.
func DefaultSharedPrefixConfig() SharedPrefixConfig {
	return SharedPrefixConfig{
		NumGroups: 64, PromptsPerGroup: 16, SystemPromptLen: 2048, QuestionLen: 128, OutputLen: 256,
		RangeRatio: 1, NumTurns: 1, Seed: 1, RequestRate: math.Inf(1),
	}
}

// Validate reports the first invalid field.
func (c SharedPrefixConfig) Validate() error {
	switch {
	case c.NumGroups < 1 || c.PromptsPerGroup < 1:
		return fmt.Errorf("%w: groups %d and prompts per group %d must be positive", ErrConfig, c.NumGroups, c.PromptsPerGroup)
	case c.NumGroups*c.PromptsPerGroup > 1<<24:
		return fmt.Errorf("%w: %d requests is too many", ErrConfig, c.NumGroups*c.PromptsPerGroup)
	case c.SystemPromptLen < 1 || c.QuestionLen < 1 || c.OutputLen < 1:
		return fmt.Errorf("%w: lengths must be positive", ErrConfig)
	case !(c.RangeRatio > 0 && c.RangeRatio <= 1):
		return fmt.Errorf("%w: range ratio %v must be in (0, 1]", ErrConfig, c.RangeRatio)
	case c.NumTurns != 1:
		return fmt.Errorf("%w: num turns %d: only 1 is supported here, use the multi-turn workload", ErrConfig, c.NumTurns)
	case !(c.RequestRate >= MinRate):
		return fmt.Errorf("%w: request rate %v must be at least %v/s (+Inf for all at once)", ErrConfig, c.RequestRate, MinRate)
	case c.MaxConcurrency < 0:
		return fmt.Errorf("%w: max concurrency %d must not be negative", ErrConfig, c.MaxConcurrency)
	}
	return nil
}

// SharedPrefix is the open-loop source of SharedPrefixConfig.
type SharedPrefix struct {
	cfg     SharedPrefixConfig
	sysLen  []int
	rows    []gspRow
	arrival []time.Duration
	next    int
}

type gspRow struct {
	group, prompt    int
	questionLen, out int
}

var _ Source = (*SharedPrefix)(nil)

// NewSharedPrefix draws the whole plan up front; prompts are built in Next.
func NewSharedPrefix(cfg SharedPrefixConfig) (*SharedPrefix, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &SharedPrefix{cfg: cfg}
	r := newRand(cfg.Seed)
	for range cfg.NumGroups {
		s.sysLen = append(s.sysLen, randLen(r, cfg.SystemPromptLen, cfg.RangeRatio))
	}
	for g := range cfg.NumGroups {
		for p := range cfg.PromptsPerGroup {
			s.rows = append(s.rows, gspRow{group: g, prompt: p,
				questionLen: randLen(r, cfg.QuestionLen, cfg.RangeRatio),
				out:         randLen(r, cfg.OutputLen, cfg.RangeRatio)})
		}
	}
	if !cfg.Ordered {
		r.Shuffle(len(s.rows), func(i, j int) { s.rows[i], s.rows[j] = s.rows[j], s.rows[i] })
	}
	var t time.Duration
	for range s.rows {
		s.arrival = append(s.arrival, t)
		t += poissonGap(r, cfg.RequestRate)
	}
	return s, nil
}

// Next implements Source. Request.Group is the group index plus one.
func (s *SharedPrefix) Next() (Request, bool) {
	i := s.next
	if i >= len(s.rows) {
		return Request{}, false
	}
	s.next++
	row := s.rows[i]
	sl := s.sysLen[row.group]
	prompt := make([]uint32, 0, sl+row.questionLen)
	prompt = appendStream(prompt, streamID(s.cfg.Seed, kindSystem, uint64(row.group), 0), 0, sl)
	prompt = appendStream(prompt, streamID(s.cfg.Seed, kindQuestion, uint64(row.group), uint64(row.prompt)), 0, row.questionLen)
	return Request{ID: i, Arrival: s.arrival[i], Prompt: prompt, OutputLen: row.out, Group: row.group + 1}, true
}

// Len implements Source.
func (s *SharedPrefix) Len() int { return len(s.rows) }

// Concurrency implements Source.
func (s *SharedPrefix) Concurrency() int { return s.cfg.MaxConcurrency }
