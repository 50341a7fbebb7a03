package sim

import (
	"reflect"
	"testing"
)

// TestKVTimeLearnsFleetSpeed: the flights feed the router's time models.
// On engines twice as slow as the mocker's prior, every worker's model
// ends up predicting far longer one-pass prefills than on engines at the
// prior's speed, and the predicted TTFT of the chosen worker stays within
// 30 % of the actual one on average (geometric mean) at both speeds.
// kv-time keeps prefixes together better than round-robin, and two runs
// agree.
func TestKVTimeLearnsFleetSpeed(t *testing.T) {
	run := func(speed float64) []Outcome {
		cfg := smallConfig()
		cfg.Engine.SpeedupRatio = speed
		o, err := Compare(cfg, []string{"kv-time", "round-robin"}, smallWorkload(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := o[0].Result; r.Requests != 128 || r.Failed != 0 {
			t.Fatalf("kv-time: %d requests, %d failed", r.Requests, r.Failed)
		}
		if len(o[0].TimeModels) != cfg.Workers {
			t.Fatalf("%d time models for %d workers", len(o[0].TimeModels), cfg.Workers)
		}
		if p := o[0].PredictionRatio; p < 0.7 || p > 1.3 || o[1].PredictionRatio != 0 {
			t.Errorf("speed %v: predicted ÷ actual TTFT %.3f (round-robin %.3f)", speed, p, o[1].PredictionRatio)
		}
		return o
	}
	fast, slow := run(1), run(0.5)
	for i, m := range slow[0].TimeModels {
		f := fast[0].TimeModels[i]
		for _, n := range []float64{64, 1088} {
			r := m.Prefill.At(n) / f.Prefill.At(n)
			t.Logf("%v: %d/%d prefill samples, slow/fast %.2f at %v tokens", m.Worker, m.PrefillSamples, f.PrefillSamples, r, n)
			if m.PrefillSamples == 0 || r < 1.6 {
				t.Errorf("%v: slow fleet's model only %.2f × the fast one's at %v tokens", m.Worker, r, n)
			}
		}
	}
	if kt, rr := fast[0].Result, fast[1].Result; kt.HitRatio <= rr.HitRatio {
		t.Errorf("kv-time hit %.3f not above round-robin %.3f", kt.HitRatio, rr.HitRatio)
	}
	if again := run(0.5); !reflect.DeepEqual(again, slow) {
		t.Fatal("two runs differ")
	}
}
