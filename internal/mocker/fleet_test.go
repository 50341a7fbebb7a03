package mocker

import (
	"errors"
	"strings"
	"testing"
)

func TestFleetEngine(t *testing.T) {
	base := DefaultConfig()
	base.SpeedupRatio = 3
	f := Fleet{Speeds: []float64{1, 0.5, 2}, BatchTokens: []int{1024}, KVBlocks: []int{100, 200, 300}}
	if err := f.Validate(base, 3); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		speedup      float64
		batch, block int
	}{{3, 1024, 100}, {1.5, 1024, 200}, {6, 1024, 300}} {
		e := f.Engine(base, i)
		if e.SpeedupRatio != want.speedup || e.MaxNumBatchedTokens != want.batch || e.NumGPUBlocks != want.block {
			t.Fatalf("worker %d: %+v", i, e)
		}
	}
	if got := f.TotalBlocks(base, 3); got != 600 {
		t.Fatalf("total %d", got)
	}
	if !f.Heterogeneous() || (Fleet{Speeds: []float64{2, 2}}).Heterogeneous() || (Fleet{}).Heterogeneous() {
		t.Fatal("heterogeneity misjudged")
	}
	// The zero Fleet is the base engine for everyone.
	if e := (Fleet{}).Engine(base, 7); e != base || (Fleet{}).TotalBlocks(base, 4) != 4*base.NumGPUBlocks {
		t.Fatalf("zero fleet: %+v", e)
	}
	for _, bad := range []struct {
		f    Fleet
		want string
	}{
		{Fleet{Speeds: []float64{1, 2}}, "worker speeds has 2 values for 3 workers"},
		{Fleet{BatchTokens: []int{1, 2}}, "worker batch tokens has 2 values for 3 workers"},
		{Fleet{KVBlocks: []int{1, 2, 3, 4}}, "worker KV blocks has 4 values for 3 workers"},
		{Fleet{Speeds: []float64{1e7}}, "worker speeds value 1 is 1e+07"},
		{Fleet{BatchTokens: []int{64, -1, 64}}, "worker 1: invalid mocker config: max num batched tokens -1"},
	} {
		if err := bad.f.Validate(base, 3); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want %q", bad.f, err, bad.want)
		}
	}
}
