package sim

import (
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/workload"
)

func smallWorkload() func() (workload.Source, error) {
	c := workload.DefaultSharedPrefixConfig()
	c.NumGroups, c.PromptsPerGroup, c.SystemPromptLen, c.QuestionLen, c.OutputLen, c.RequestRate = 16, 8, 1024, 64, 16, 40
	return func() (workload.Source, error) { return workload.NewSharedPrefix(c) }
}

func smallConfig() Config {
	cfg := DefaultConfig()
	cfg.Workers = 4
	cfg.Engine.BlockSize = 16
	cfg.Engine.NumGPUBlocks = 512
	return cfg
}

func TestCompareSmall(t *testing.T) {
	policies := []string{"kv", "round-robin", "random", "least-loaded"}
	a, err := Compare(smallConfig(), policies, smallWorkload(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range a {
		r := o.Result
		t.Logf("%s: hit %.3f bound %.3f ttft p50 %.1f ms max share %.2f preempt %d", r.Policy, r.HitRatio, r.BoundHitRatio, r.TTFTP50Ms, r.MaxWorkerShare, r.Preemptions)
		if r.Requests != 128 || r.Failed != 0 {
			t.Fatalf("%s: %d requests, %d failed", r.Policy, r.Requests, r.Failed)
		}
		if r.TTFTP50Ms <= 0 || r.E2EP50Ms < r.TTFTP50Ms || r.BoundHitRatio <= 0 || len(o.Load.Times) == 0 {
			t.Fatalf("%s: implausible result %+v", r.Policy, r)
		}
	}
	if kv, rr := a[0].Result, a[1].Result; kv.HitRatio <= rr.HitRatio {
		t.Fatalf("kv hit %.3f not above round-robin %.3f", kv.HitRatio, rr.HitRatio)
	}
	b, err := Compare(smallConfig(), policies, smallWorkload(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs differ")
	}
}
