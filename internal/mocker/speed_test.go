package mocker

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestSetSpeedupRatio checks that a speed change takes effect from the
// next step, against the timing polynomials: a 40-token prefill at ratio
// 1 costs PrefillMs(40), its first decode DecodeMs(usage)/1, and after
// SetSpeedupRatio(4) the next decode costs DecodeMs(usage)/4.
func TestSetSpeedupRatio(t *testing.T) {
	e := mustEngine(t, testConfig())
	if err := e.Add(Request{ID: 1, Tokens: seqTokens(0, 40), MaxTokens: 4}); err != nil {
		t.Fatal(err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	near := func(got time.Duration, want float64) bool { return math.Abs(ms(got)-want) < 1e-6 }
	if got := e.Step().Duration; !near(got, PrefillMs(40)) {
		t.Fatalf("prefill step %v, want %.6f ms", got, PrefillMs(40))
	}
	// Usage is read after the step: the step allocates its block first.
	got := e.Step().Duration
	if usage := e.Stats().Usage(); !near(got, DecodeMs(usage)) {
		t.Fatalf("decode step at ratio 1: %v, want %.6f ms", got, DecodeMs(usage))
	}
	if err := e.SetSpeedupRatio(4); err != nil {
		t.Fatal(err)
	}
	got = e.Step().Duration
	if usage := e.Stats().Usage(); !near(got, DecodeMs(usage)/4) {
		t.Fatalf("decode step at ratio 4: %v, want %.6f ms", got, DecodeMs(usage)/4)
	}
	if e.Config().SpeedupRatio != 4 {
		t.Fatalf("config ratio %v", e.Config().SpeedupRatio)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		if err := e.SetSpeedupRatio(bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("ratio %v: %v", bad, err)
		}
	}
	if e.Config().SpeedupRatio != 4 {
		t.Fatalf("a refused ratio changed the config to %v", e.Config().SpeedupRatio)
	}
}
