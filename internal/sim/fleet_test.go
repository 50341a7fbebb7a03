package sim

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// lone returns n requests of distinct prompts (nothing shared) of the
// given length, each arriving gap after the previous, one output token.
func lone(n, tokens int, gap time.Duration) []workload.Request {
	var reqs []workload.Request
	for i := range n {
		p := make([]uint32, tokens)
		for j := range p {
			p[j] = uint32(1 + i*tokens + j)
		}
		reqs = append(reqs, workload.Request{Arrival: time.Duration(i) * gap, Prompt: p, OutputLen: 1})
	}
	return reqs
}

// runTTFTs runs reqs under policy and returns the TTFTs in ms, sorted.
func runTTFTs(t *testing.T, cfg Config, policy string, reqs []workload.Request) ([]float64, Outcome) {
	t.Helper()
	o, err := Run(cfg, policy, workload.NewSlice(reqs, 0), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(o.TTFTs)
	slices.Sort(got)
	return got, o
}

func closeMs(got []float64, want ...float64) bool {
	if len(got) != len(want) {
		return false
	}
	slices.Sort(want)
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-5 {
			return false
		}
	}
	return true
}

// TestWorkerSpeedsScaleSteps checks per-worker speeds against the mocker's
// timing formula: a lone 1,000-token prompt's TTFT is one prefill step,
// PrefillMs(1000) / (speedup ratio × the worker's speed). Round-robin
// sends one request to each of three workers of speeds 1, 2 and 4 under a
// global speedup ratio of 1.5.
func TestWorkerSpeedsScaleSteps(t *testing.T) {
	cfg := smallConfig()
	cfg.Workers = 3
	cfg.Engine.SpeedupRatio = 1.5
	cfg.Fleet.Speeds = []float64{1, 2, 4}
	got, o := runTTFTs(t, cfg, "round-robin", lone(3, 1000, time.Second))
	p := mocker.PrefillMs(1000)
	if !closeMs(got, p/1.5, p/3, p/6) {
		t.Fatalf("TTFTs %v ms, want %v, %v, %v", got, p/1.5, p/3, p/6)
	}
	if !slices.Equal(o.WorkerRequests, []int{1, 1, 1}) {
		t.Fatalf("worker requests %v", o.WorkerRequests)
	}
	// One value is every worker's speed.
	cfg.Fleet.Speeds = []float64{2}
	if got, _ = runTTFTs(t, cfg, "round-robin", lone(3, 1000, time.Second)); !closeMs(got, p/3, p/3, p/3) {
		t.Fatalf("one speed for all: TTFTs %v, want 3 × %v", got, p/3)
	}
}

// TestWorkerBatchTokensChunkPrefill checks per-worker token budgets: on a
// worker with a 256-token budget a 1,000-token prompt prefills in chunks
// of 256, 256, 256 and 232 tokens (four steps), on one with the default
// 8,192 in one step.
func TestWorkerBatchTokensChunkPrefill(t *testing.T) {
	cfg := smallConfig()
	cfg.Workers = 2
	cfg.Fleet.BatchTokens = []int{256, 8192}
	got, _ := runTTFTs(t, cfg, "round-robin", lone(2, 1000, time.Second))
	p := mocker.PrefillMs
	if !closeMs(got, 3*p(256)+p(232), p(1000)) {
		t.Fatalf("TTFTs %v, want %v and %v", got, 3*p(256)+p(232), p(1000))
	}
}

// TestSpeedChangeMidRun checks that a speed change applies to the steps
// that start after it: requests at 0 s and 10 s on one worker, the speed
// going from 1 to 4 at 5 s.
func TestSpeedChangeMidRun(t *testing.T) {
	cfg := smallConfig()
	cfg.Workers = 1
	cfg.SpeedChanges = []SpeedChange{{At: 5 * time.Second, Speeds: []float64{4}}, {At: time.Hour, Speeds: []float64{1}}}
	_, o := runTTFTs(t, cfg, "kv", lone(2, 1000, 10*time.Second))
	p := mocker.PrefillMs(1000)
	if len(o.TTFTs) != 2 || math.Abs(o.TTFTs[0]-p) > 1e-5 || math.Abs(o.TTFTs[1]-p/4) > 1e-5 {
		t.Fatalf("TTFTs in order %v, want %v then %v", o.TTFTs, p, p/4)
	}
	// The change at one hour comes after the last request: it must not
	// stretch the run.
	if o.Duration > 11*time.Second {
		t.Fatalf("run lasted %v", o.Duration)
	}
}

// TestWorkerKVBlocks checks that per-worker KV capacities reach the
// engines and size the bound's shared pool.
func TestWorkerKVBlocks(t *testing.T) {
	cfg := smallConfig() // 4 workers of 512 blocks
	cfg.Fleet.KVBlocks = []int{128, 256, 512, 1024}
	if got := cfg.TotalBlocks(); got != 1920 {
		t.Fatalf("total blocks %d", got)
	}
	for i, want := range cfg.Fleet.KVBlocks {
		if got := cfg.EngineConfig(i).NumGPUBlocks; got != want {
			t.Fatalf("worker %d: %d blocks", i, got)
		}
	}
	outs, err := Compare(cfg, []string{"kv"}, smallWorkload(), nil)
	if err != nil || outs[0].Result.Requests != 128 {
		t.Fatalf("%v %+v", err, outs)
	}
}

func TestFleetListValidation(t *testing.T) {
	for name, c := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"speeds length": {func(c *Config) { c.Fleet.Speeds = []float64{1, 2, 3} }, "worker speeds has 3 values for 4 workers"},
		"zero speed":    {func(c *Config) { c.Fleet.Speeds = []float64{1, 0, 1, 1} }, "worker speeds value 2 is 0"},
		"NaN speed":     {func(c *Config) { c.Fleet.Speeds = []float64{math.NaN()} }, "worker speeds value 1 is NaN"},
		"batch length":  {func(c *Config) { c.Fleet.BatchTokens = []int{1, 2} }, "worker batch tokens has 2 values for 4 workers"},
		"batch value":   {func(c *Config) { c.Fleet.BatchTokens = []int{0} }, "max num batched tokens 0"},
		"kv length":     {func(c *Config) { c.Fleet.KVBlocks = []int{1, 2, 3, 4, 5} }, "worker KV blocks has 5 values for 4 workers"},
		"kv value":      {func(c *Config) { c.Fleet.KVBlocks = []int{512, 512, 1, 512} }, "worker 2: invalid mocker config"},
		"change order": {func(c *Config) {
			c.SpeedChanges = []SpeedChange{{At: 2, Speeds: []float64{1}}, {At: 1, Speeds: []float64{1}}}
		}, "speed change 2 at 1ns"},
		"change no speeds":  {func(c *Config) { c.SpeedChanges = []SpeedChange{{At: 1}} }, "has no speeds"},
		"change length":     {func(c *Config) { c.SpeedChanges = []SpeedChange{{At: 1, Speeds: []float64{1, 1}}} }, "speed change 1 has 2 values"},
		"change zero speed": {func(c *Config) { c.SpeedChanges = []SpeedChange{{At: 1, Speeds: []float64{-1}}} }, "speed change 1 value 1 is -1"},
	} {
		cfg := smallConfig()
		c.mut(&cfg)
		err := cfg.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrConfig saying %q", name, err, c.want)
		}
	}
	cfg := smallConfig()
	cfg.Fleet.Speeds, cfg.Fleet.BatchTokens, cfg.Fleet.KVBlocks = []float64{1, 1, 2, 2}, []int{4096}, []int{512, 512, 1024, 1024}
	cfg.SpeedChanges = []SpeedChange{{At: time.Minute, Speeds: []float64{0.5}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !cfg.Fleet.Heterogeneous() {
		t.Fatal("speeds 1,1,2,2 not heterogeneous")
	}
}
