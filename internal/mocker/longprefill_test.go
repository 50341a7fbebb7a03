package mocker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// longPrefillTrace runs one fixed script on an engine of 4-token blocks and
// a 40-token step budget with the given long-prefill threshold and returns
// each step's tokens and outputs: A (40 tokens, 2 outputs) before step 1;
// B and C (24 tokens each, 1 output) before step 2; D (A's first 36 tokens
// then 20 new ones, 1 output) before step 5; then steps until idle.
func longPrefillTrace(t *testing.T, threshold int) []string {
	t.Helper()
	c := testConfig()
	c.MaxNumBatchedTokens = 40
	c.LongPrefillTokenThreshold = threshold
	e := mustEngine(t, c)
	add := func(id uint64, toks []uint32, maxTokens int) {
		if err := e.Add(Request{ID: id, Tokens: toks, MaxTokens: maxTokens}); err != nil {
			t.Fatal(err)
		}
	}
	var trace []string
	step := func() {
		res := e.Step()
		s := fmt.Sprintf("prefill %d decode %d scheduled %d", res.PrefillTokens, res.DecodeTokens, res.Scheduled)
		for _, o := range res.Outputs {
			s += fmt.Sprintf("; %c g%d", 'A'+rune(o.ID-1), o.Generated)
			if o.Finished {
				s += " done"
			}
			if o.CachedTokens > 0 {
				s += fmt.Sprintf(" cached %d", o.CachedTokens)
			}
		}
		trace = append(trace, s)
	}
	add(1, seqTokens(0, 40), 2)
	step()
	add(2, seqTokens(1000, 24), 1)
	add(3, seqTokens(2000, 24), 1)
	step()
	step()
	step()
	add(4, append(seqTokens(0, 36), seqTokens(3000, 20)...), 1)
	for i := 0; !e.Idle(); i++ {
		if i > 100 {
			t.Fatal("engine does not drain")
		}
		step()
	}
	return trace
}

// TestLongPrefillThresholdWorkedExample checks the cap against a trace
// computed by hand. Threshold 16, budget 40 (vLLM caps a request's new
// tokens at the threshold first, then at the budget left):
//
//	step 1: A admitted, 40 to compute > 16: 16.                      prefill 16
//	step 2: A running, 24 left: 16 (budget 40 → 24); B waiting, 24: 16
//	        (→ 8); C waiting, 24 > 16 but only 8 left: 8 (→ 0).       prefill 40
//	step 3: A 8 left: 8; B 8 left: 8; C 16 left (not over 16): 16.   prefill 32
//	        A's prefill ends (first token); B and C end (1 output each).
//	step 4: A decodes its second token and ends.                     decode 1
//	D arrives: A's cached blocks hold its first 36 tokens (9 blocks of 4),
//	so 20 tokens are left to compute, over 16:
//	step 5: D 16.                                                    prefill 16
//	step 6: D 4; D ends, 36 tokens cached.                           prefill 4
//
// Negative control, the same script with the cap off (threshold 0):
//
//	step 1: A all 40 (the whole budget); first token.                prefill 40
//	step 2: A decodes 1 (budget 39); B all 24 (→ 15); C 15 (→ 0).   prefill 39 decode 1
//	        A ends; B ends.
//	step 3: C's last 9; C ends.                                      prefill 9
//	step 4: nothing to do.
//	step 5: D's 20 uncached tokens at once; D ends.                  prefill 20
func TestLongPrefillThresholdWorkedExample(t *testing.T) {
	want := map[int][]string{
		16: {
			"prefill 16 decode 0 scheduled 1",
			"prefill 40 decode 0 scheduled 3",
			"prefill 32 decode 0 scheduled 3; A g1; B g1 done; C g1 done",
			"prefill 0 decode 1 scheduled 1; A g2 done",
			"prefill 16 decode 0 scheduled 1",
			"prefill 4 decode 0 scheduled 1; D g1 done cached 36",
		},
		0: {
			"prefill 40 decode 0 scheduled 1; A g1",
			"prefill 39 decode 1 scheduled 3; A g2 done; B g1 done",
			"prefill 9 decode 0 scheduled 1; C g1 done",
			"prefill 0 decode 0 scheduled 0",
			"prefill 20 decode 0 scheduled 1; D g1 done cached 36",
		},
	}
	for _, th := range []int{16, 0} {
		got := longPrefillTrace(t, th)
		if !slices.Equal(got, want[th]) {
			t.Errorf("threshold %d:\n got %q\nwant %q", th, got, want[th])
		}
	}
	// A threshold at or above every request's tokens changes nothing.
	if got := longPrefillTrace(t, 40); !slices.Equal(got, want[0]) {
		t.Errorf("threshold 40 (no prompt over it):\n got %q\nwant %q", got, want[0])
	}
}

// TestLongPrefillStepTime checks that a capped step costs the prefill
// polynomial of the tokens it computed: two 24-token prompts under a
// threshold of 16 make a 32-token step.
func TestLongPrefillStepTime(t *testing.T) {
	c := testConfig()
	c.LongPrefillTokenThreshold = 16
	e := mustEngine(t, c)
	for id := range uint64(2) {
		if err := e.Add(Request{ID: id, Tokens: seqTokens(1000*int(id), 24), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	res := e.Step()
	want := time.Duration(PrefillMs(32) * float64(time.Millisecond))
	if res.PrefillTokens != 32 || res.Duration != want {
		t.Fatalf("step: %d prefill tokens in %v, want 32 in %v", res.PrefillTokens, res.Duration, want)
	}
}

func TestLongPrefillThresholdValidate(t *testing.T) {
	c := DefaultConfig()
	c.LongPrefillTokenThreshold = -1
	if err := c.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("threshold -1: got %v, want ErrConfig", err)
	}
	c.LongPrefillTokenThreshold = 1
	if err := c.Validate(); err != nil {
		t.Fatalf("threshold 1: %v", err)
	}
}
