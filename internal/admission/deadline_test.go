package admission

import (
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// TestLate is the worked example of deadline-aware release with a 2 s
// target: a request that arrived at 0 and is released at 1.5 s makes it
// with a predicted prefill of 400 ms (1.9 s) or 500 ms (exactly 2 s), and
// is late with 600 ms (2.1 s). With the target off nothing is late.
func TestLate(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.TTFTTarget = 2 * time.Second })
	e := Entry{ID: "r", Arrival: t0}
	now := t0.Add(1500 * time.Millisecond)
	for _, c := range []struct {
		prefill time.Duration
		late    bool
	}{{400 * time.Millisecond, false}, {500 * time.Millisecond, false}, {600 * time.Millisecond, true}, {-time.Hour, false}} {
		if got := q.Late(e, now, c.prefill); got != c.late {
			t.Fatalf("released at 1.5 s with a %v prefill: late %v, want %v", c.prefill, got, c.late)
		}
	}
	if q.Late(e, t0.Add(2001*time.Millisecond), 0) != true {
		t.Fatal("a request that already waited past the target is not late")
	}
	// A prediction past what a Duration holds saturates (it used to
	// convert to a negative Duration), and a saturated one is late.
	huge := LeastPrefill(timemodel.Poly{B: 1e300}, scheduler.Explanation{}, 1<<20, 16, 8192)
	if huge != math.MaxInt64 || !q.Late(e, now, huge) {
		t.Fatalf("a 1e300 ms/token worker predicts %v (late %v), want the longest Duration, late", huge, q.Late(e, now, huge))
	}
	off := newQueue(t, nil)
	if off.Late(e, t0.Add(time.Hour), time.Hour) {
		t.Fatal("late with the target off")
	}
}

// TestLeastPrefillAgainstTheMockEngine checks the prediction against the
// mock engine itself, whose passes take the prior polynomial's time. On a
// fresh engine (8,192 tokens per pass) a lone 4,096-token prompt gets its
// first token after one pass: the prediction from the prior matches
// within 0.5 %. Queued behind an 8,192-token prompt it takes two passes;
// the least prefill leaves the queued work out, so it is the same one
// pass, below what the engine took: a lower bound.
func TestLeastPrefillAgainstTheMockEngine(t *testing.T) {
	prompt := func(n int, seed uint32) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = seed*1_000_003 + uint32(i)
		}
		return out
	}
	firstToken := func(ahead int) time.Duration {
		eng, err := mocker.NewEngine(mocker.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if ahead > 0 {
			if err := eng.Add(mocker.Request{ID: 1, Tokens: prompt(ahead, 1), MaxTokens: 64}); err != nil {
				t.Fatal(err)
			}
		}
		if err := eng.Add(mocker.Request{ID: 2, Tokens: prompt(4096, 2), MaxTokens: 64}); err != nil {
			t.Fatal(err)
		}
		var at time.Duration
		for range 10 {
			res := eng.Step()
			at += res.Duration
			for _, o := range res.Outputs {
				if o.ID == 2 && o.First {
					return at
				}
			}
		}
		t.Fatal("no first token in 10 passes")
		return 0
	}
	alone, queued := firstToken(0), firstToken(8192)
	least := LeastPrefill(timemodel.PriorPrefill, scheduler.Explanation{ActivePrefillTokens: 8192}, 4096, 64, 8192)
	if math.Abs(float64(least-alone)) > 0.005*float64(alone) {
		t.Fatalf("least prefill %v, the engine took %v for the prompt alone", least, alone)
	}
	if least >= queued {
		t.Fatalf("least prefill %v is not below the engine's %v behind 8,192 queued tokens", least, queued)
	}
	// Decodes share the passes: with 100 running requests the pass
	// computes 4,096 + 100 tokens.
	busy := scheduler.Explanation{ActiveRequests: 100}
	if got, want := LeastPrefill(timemodel.PriorPrefill, busy, 4096, 64, 8192), time.Duration(timemodel.PriorPrefillMs(4196)*float64(time.Millisecond)); got != want {
		t.Fatalf("beside 100 decodes: %v, want %v", got, want)
	}
	// A cached prefix is not computed: 4,096 tokens of which 32 blocks
	// of 64 are cached is one pass of 2,048.
	cached := scheduler.Explanation{Overlap: scheduler.Overlap{Device: 32}}
	if got, want := LeastPrefill(timemodel.PriorPrefill, cached, 4096, 64, 8192), time.Duration(timemodel.PriorPrefillMs(2048)*float64(time.Millisecond)); got != want {
		t.Fatalf("with a 2,048-token cached prefix: %v, want %v", got, want)
	}
	if LeastPrefill(timemodel.Poly{A: -100}, scheduler.Explanation{}, 1, 64, 8192) != 0 {
		t.Fatal("a negative prediction is not clamped to 0")
	}
}
