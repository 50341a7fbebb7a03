package config

import (
	"testing"
	"time"
)

// TestKVTimeKnobs checks that --router-mode kv-time and the kv-time knobs
// reach the router's config from the flags and the environment, and that
// their defaults are the scheduler's and the time model's.
func TestKVTimeKnobs(t *testing.T) {
	c, err := Load(nil, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RouterConfig()
	if rc.Policy != "kv" || rc.KVTime.Tolerance != 0.05 || rc.KVTime.DecodeWeight != 0.1 || rc.KVTime.RecomputeWeight != 8 || rc.TimeModel.HalfLife != 15*time.Second {
		t.Fatalf("defaults: policy %q, kv-time %+v, half-life %v", rc.Policy, rc.KVTime, rc.TimeModel.HalfLife)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flags", []string{"--router-mode", "kv-time", "--kv-time-tolerance", "0.2", "--kv-time-decode-weight", "0", "--kv-time-recompute-weight", "2", "--kv-time-half-life", "40s"}, nil},
		{"env", nil, []string{"KVROUTER_ROUTER_MODE=kv-time", "KVROUTER_KV_TIME_TOLERANCE=0.2", "KVROUTER_KV_TIME_DECODE_WEIGHT=0", "KVROUTER_KV_TIME_RECOMPUTE_WEIGHT=2", "KVROUTER_KV_TIME_HALF_LIFE=40s"}},
	} {
		c, err := Load(tc.args, Options{Name: "serve", Environ: tc.env})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		rc := c.RouterConfig()
		if rc.Policy != "kv-time" || rc.KVTime.Tolerance != 0.2 || rc.KVTime.DecodeWeight != 0 || rc.KVTime.RecomputeWeight != 2 || rc.TimeModel.HalfLife != 40*time.Second {
			t.Errorf("%s: policy %q, kv-time %+v, half-life %v", tc.name, rc.Policy, rc.KVTime, rc.TimeModel.HalfLife)
		}
	}
	if _, err := Load([]string{"--kv-time-tolerance", "-1"}, Options{Name: "serve"}); err == nil {
		t.Error("negative tolerance accepted")
	}
	if _, err := Load([]string{"--kv-time-recompute-weight", "-1"}, Options{Name: "serve"}); err == nil {
		t.Error("negative recompute weight accepted")
	}
}
