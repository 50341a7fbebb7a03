package config

import "testing"

// TestRouterCostKnobs checks that the opt-in cost knobs (prefill clamp,
// decode term) default to the cost formula of docs/design.md and reach the router's scheduler and
// ledger from the file, the environment and the flags.
func TestRouterCostKnobs(t *testing.T) {
	c, err := Load(nil, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RouterConfig()
	if !c.Router.PrefillClamp || !rc.Scheduler.PrefillClamp || !c.Router.TrackActiveBlocks || !rc.Sequences.TrackActiveBlocks {
		t.Fatalf("defaults: clamp %v/%v, track active blocks %v/%v, want all true",
			c.Router.PrefillClamp, rc.Scheduler.PrefillClamp, c.Router.TrackActiveBlocks, rc.Sequences.TrackActiveBlocks)
	}
	file := writeFile(t, "router-prefill-clamp: false\nrouter-track-active-blocks: false\nkv-overlap-score-credit: 16\nrouter-prefill-load-scale: 16\n")
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"file", []string{"--config", file}, nil},
		{"env", nil, []string{"KVROUTER_ROUTER_PREFILL_CLAMP=false", "KVROUTER_ROUTER_TRACK_ACTIVE_BLOCKS=false",
			"KVROUTER_KV_OVERLAP_SCORE_CREDIT=16", "KVROUTER_ROUTER_PREFILL_LOAD_SCALE=16"}},
		{"flags", []string{"--router-prefill-clamp=false", "--router-track-active-blocks=false",
			"--kv-overlap-score-credit", "16", "--router-prefill-load-scale", "16"}, nil},
	} {
		c, err := Load(tc.args, Options{Name: "serve", Environ: tc.env})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rc := c.RouterConfig()
		if rc.Scheduler.PrefillClamp || rc.Sequences.TrackActiveBlocks || rc.Scheduler.OverlapScoreCredit != 16 || rc.Scheduler.PrefillLoadScale != 16 {
			t.Errorf("%s: scheduler %+v, track active blocks %v", tc.name, rc.Scheduler, rc.Sequences.TrackActiveBlocks)
		}
	}
	// A flag beats the file: the clamp comes back on.
	c, err = Load([]string{"--config", file, "--router-prefill-clamp=true"}, Options{Name: "serve"})
	if err != nil || !c.RouterConfig().Scheduler.PrefillClamp {
		t.Fatalf("flag over file: clamp %v, %v", c.Router.PrefillClamp, err)
	}
}
