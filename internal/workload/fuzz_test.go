package workload

import (
	"errors"
	"math"
	"testing"
	"time"
)

// FuzzConfigs feeds arbitrary knob values to every generator: a config
// either fails Validate with ErrConfig or yields a well-formed stream, and
// nothing panics. Sizes are capped so one input runs in milliseconds.
func FuzzConfigs(f *testing.F) {
	f.Add(3, 2, 100, 10, 5, 0.5, 1.0, int64(0), uint64(1))
	f.Add(0, -1, 0, 0, 0, math.NaN(), math.Inf(1), int64(-5), uint64(0))
	f.Add(1, 1, 1, 1, 1, 1e-9, 1e300, int64(1), uint64(7))
	f.Add(5, 3, 10, 10, 10, 1.0, 1e-6, int64(1<<62), uint64(2))
	f.Add(5, 3, 10, 10, 10, 1.0, 1e-300, int64(1), uint64(2))
	f.Fuzz(func(t *testing.T, a, b, l1, l2, l3 int, ratio, rate float64, think int64, seed uint64) {
		small := func(v int) int { return v % 300 }
		pr := PrefixRatioConfig{ISL: small(l1), OSL: small(l2), Requests: small(a) % 20, Concurrency: b,
			NumPrefixPrompts: small(a), PrefixRatio: ratio, Seed: seed}
		gsp := SharedPrefixConfig{NumGroups: small(a) % 10, PromptsPerGroup: small(b) % 10, SystemPromptLen: small(l1),
			QuestionLen: small(l2), OutputLen: small(l3), RangeRatio: ratio, NumTurns: 1, RequestRate: rate, Seed: seed}
		mt := MultiTurnConfig{Sessions: small(a) % 10, Turns: small(b) % 6, SystemPrompts: small(l3), SystemPromptLen: small(l1),
			UserLen: small(l2), OutputLen: small(l3), RangeRatio: ratio, SessionRate: rate, ThinkTime: time.Duration(think), Seed: seed}
		var srcs []Source
		if s, err := NewPrefixRatio(pr); err == nil {
			srcs = append(srcs, s)
		} else if !errors.Is(err, ErrConfig) {
			t.Fatal(err)
		}
		if s, err := NewSharedPrefix(gsp); err == nil {
			srcs = append(srcs, s)
		} else if !errors.Is(err, ErrConfig) {
			t.Fatal(err)
		}
		if s, err := NewMultiTurn(mt); err == nil {
			srcs = append(srcs, s)
		} else if !errors.Is(err, ErrConfig) {
			t.Fatal(err)
		}
		for _, s := range srcs {
			n := 0
			var last time.Duration
			for r, ok := s.Next(); ok; r, ok = s.Next() {
				if r.ID != n || r.OutputLen < 1 || r.Arrival < last || r.Arrival < 0 {
					t.Fatalf("%T request %d: %+v", s, n, r)
				}
				last = r.Arrival
				n++
			}
			if n != s.Len() {
				t.Fatalf("%T: %d requests, Len %d", s, n, s.Len())
			}
		}
	})
}
