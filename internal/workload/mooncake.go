package workload

import (
	"fmt"
	"sort"
	"time"

	"github.com/kvrouter/kvrouter/internal/trace"
)

// MooncakeConfig controls how a Mooncake trace is replayed.
type MooncakeConfig struct {
	// Speedup divides every arrival time (2 replays the trace twice as
	// fast). Dynamo calls it speedup_ratio. Default 1; must be positive.
	Speedup float64
	// Spread, when true, moves each request to a uniformly random time
	// inside its timestamp bucket [timestamp, timestamp+Bucket) instead of
	// firing the whole bucket as one burst. Default false (burst replay, as
	// AIPerf --fixed-schedule does).
	Spread bool
	// Bucket is the width of a timestamp bucket in trace time (before
	// Speedup). Default 3 s, the bucketing of the conversation and arXiv
	// traces.
	Bucket time.Duration
	// Seed drives Spread. Default 0.
	Seed uint64
	// Limit keeps only the first Limit requests (in arrival order); 0 keeps
	// all. Default 0.
	Limit int
}

// DefaultMooncakeConfig returns burst replay at real time.
func DefaultMooncakeConfig() MooncakeConfig {
	return MooncakeConfig{Speedup: 1, Bucket: 3 * time.Second}
}

// Validate reports the first invalid field.
func (c MooncakeConfig) Validate() error {
	switch {
	case !(c.Speedup >= 1e-3 && c.Speedup <= 1e6):
		return fmt.Errorf("%w: speedup %v must be in [0.001, 1e6]", ErrConfig, c.Speedup)
	case c.Spread && (c.Bucket <= 0 || c.Bucket > time.Hour):
		return fmt.Errorf("%w: bucket %v must be in (0, 1h]", ErrConfig, c.Bucket)
	case c.Limit < 0:
		return fmt.Errorf("%w: limit %d must not be negative", ErrConfig, c.Limit)
	}
	return nil
}

// maxArrival bounds replayed arrival times, far from time.Duration's limit.
const maxArrival = 100 * 365 * 24 * time.Hour

// Mooncake replays trace rows as an open-loop source. Each hash id expands
// to 512 deterministic tokens (trace.Request.Tokens), the last block cut to
// input_length; arrival is timestamp (plus spread) divided by Speedup.
type Mooncake struct {
	rows    []trace.Request
	arrival []time.Duration
	order   []int
	next    int
}

var _ Source = (*Mooncake)(nil)

// NewMooncake builds a source over rows (as returned by trace.Load, sorted by
// timestamp). The rows are not copied and must not change while in use.
func NewMooncake(rows []trace.Request, cfg MooncakeConfig) (*Mooncake, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Mooncake{rows: rows, arrival: make([]time.Duration, len(rows)), order: make([]int, len(rows))}
	r := newRand(cfg.Seed)
	for i, q := range rows {
		t := float64(q.Timestamp) * float64(time.Millisecond)
		if cfg.Spread {
			t += r.Float64() * float64(cfg.Bucket)
		}
		if t /= cfg.Speedup; t > float64(maxArrival) {
			return nil, fmt.Errorf("%w: row %d: arrival %.0f ms is beyond %v", ErrConfig, i, t/1e6, maxArrival)
		}
		m.arrival[i] = time.Duration(t)
		m.order[i] = i
	}
	sort.SliceStable(m.order, func(a, b int) bool { return m.arrival[m.order[a]] < m.arrival[m.order[b]] })
	if cfg.Limit > 0 && cfg.Limit < len(m.order) {
		m.order = m.order[:cfg.Limit]
	}
	return m, nil
}

// Next implements Source.
func (m *Mooncake) Next() (Request, bool) {
	if m.next >= len(m.order) {
		return Request{}, false
	}
	i := m.order[m.next]
	q := m.rows[i]
	req := Request{
		ID:        m.next,
		Arrival:   m.arrival[i],
		Prompt:    q.Tokens(make([]uint32, 0, q.InputLength), uint64(i)+1),
		OutputLen: max(q.OutputLength, 1),
	}
	m.next++
	return req, true
}

// Len implements Source.
func (m *Mooncake) Len() int { return len(m.order) }

// Concurrency implements Source: trace replay is open loop.
func (m *Mooncake) Concurrency() int { return 0 }
