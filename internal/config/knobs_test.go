package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router"
)

// knobArgs sets every knob away from its default.
var knobArgs = []string{
	"--kv-overlap-score-credit-decay", "0.5",
	"--router-shared-cache-multiplier", "0.25",
	"--router-decode-active-request-weight", "3",
	"--router-track-prefill-tokens=false",
	"--router-assume-kv-reuse=false",
	"--router-active-sequence-stride", "4",
	"--router-track-output-blocks",
}

// checkKnobs compares the router core's configuration with knobArgs.
func checkKnobs(t *testing.T, what string, rc router.Config) {
	t.Helper()
	s, q := rc.Scheduler, rc.Sequences
	if s.OverlapScoreCreditDecay != 0.5 || s.SharedCacheMultiplier != 0.25 || s.DecodeActiveRequestWeight != 3 ||
		s.TrackPrefillTokens || q.TrackPrefillTokens || q.AssumeKVReuse || q.ActiveSequenceStride != 4 || !q.TrackOutputBlocks {
		t.Errorf("%s: scheduler %+v, sequences %+v", what, s, q)
	}
}

// TestKnobs: the scheduler and ledger options that were library-only
// default to Dynamo's values (decay, shared multiplier and request weight
// 0, prefill tracking and KV reuse on, stride 1, output blocks off) and
// reach the router core from serve's and up's flags, the file and the
// environment; bad values are refused naming the flag.
func TestKnobs(t *testing.T) {
	c, err := Load(nil, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RouterConfig()
	s, q := rc.Scheduler, rc.Sequences
	if s.OverlapScoreCreditDecay != 0 || s.SharedCacheMultiplier != 0 || s.DecodeActiveRequestWeight != 0 ||
		!s.TrackPrefillTokens || !q.TrackPrefillTokens || !q.AssumeKVReuse || q.ActiveSequenceStride != 1 || q.TrackOutputBlocks {
		t.Fatalf("defaults: scheduler %+v, sequences %+v", s, q)
	}
	c, err = Load(knobArgs, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	checkKnobs(t, "serve flags", c.RouterConfig())
	u, _, err := LoadCommand[Up](knobArgs, DefaultUp, Options{Name: "up"})
	if err != nil {
		t.Fatal(err)
	}
	checkKnobs(t, "up flags", u.Router().RouterConfig())
	file := writeFile(t, "kv-overlap-score-credit-decay: 0.5\nrouter-shared-cache-multiplier: 0.25\n"+
		"router-decode-active-request-weight: 3\nrouter-track-prefill-tokens: false\nrouter-assume-kv-reuse: false\n"+
		"router-active-sequence-stride: 4\nrouter-track-output-blocks: true\n")
	if c, err = Load([]string{"--config", file}, Options{Name: "serve"}); err != nil {
		t.Fatal(err)
	}
	checkKnobs(t, "file", c.RouterConfig())
	c, err = Load(nil, Options{Name: "serve", Environ: []string{
		"KVROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY=0.5", "KVROUTER_ROUTER_SHARED_CACHE_MULTIPLIER=0.25",
		"KVROUTER_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT=3", "KVROUTER_ROUTER_TRACK_PREFILL_TOKENS=false",
		"KVROUTER_ROUTER_ASSUME_KV_REUSE=false", "KVROUTER_ROUTER_ACTIVE_SEQUENCE_STRIDE=4",
		"KVROUTER_ROUTER_TRACK_OUTPUT_BLOCKS=true"}})
	if err != nil {
		t.Fatal(err)
	}
	checkKnobs(t, "environment", c.RouterConfig())
	for _, bad := range [][]string{
		{"--kv-overlap-score-credit-decay", "-1"},
		{"--kv-overlap-score-credit-decay", "+Inf"},
		{"--router-shared-cache-multiplier", "NaN"},
		{"--router-decode-active-request-weight", "-0.5"},
		{"--router-active-sequence-stride", "0"},
		{"--router-active-sequence-stride", "65537"},
	} {
		_, err := Load(bad, Options{Name: "serve"})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want ErrInvalid naming %s", bad, err, bad[0])
		}
	}
}

// TestSimKnobs: kvrouter sim takes the knobs that apply to a simulated
// fleet and hands them to its router.
func TestSimKnobs(t *testing.T) {
	s, _, err := LoadCommand[Sim]([]string{"--kv-overlap-score-credit-decay", "2", "--router-decode-active-request-weight", "1.5",
		"--router-track-prefill-tokens=false", "--router-assume-kv-reuse=false", "--router-active-sequence-stride", "2"},
		DefaultSim, Options{Name: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	sc, q := s.Sim.Router.Scheduler, s.Sim.Router.Sequences
	if sc.OverlapScoreCreditDecay != 2 || sc.DecodeActiveRequestWeight != 1.5 || sc.TrackPrefillTokens || q.TrackPrefillTokens ||
		q.AssumeKVReuse || q.ActiveSequenceStride != 2 {
		t.Fatalf("sim router: scheduler %+v, sequences %+v", sc, q)
	}
	d := DefaultSim()
	if !d.Sim.Router.Scheduler.TrackPrefillTokens || !d.Sim.Router.Sequences.TrackPrefillTokens {
		t.Fatal("sim default: prefill tracking must be on")
	}
}
