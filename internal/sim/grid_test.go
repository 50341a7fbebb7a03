package sim

import (
	"math"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/report"
)

func TestKVGrid(t *testing.T) {
	g := KVGrid()
	if len(g) != 36 || g[0] != (KVSetting{0.5, 1, true}) || g[35] != (KVSetting{16, 16, false}) {
		t.Fatalf("%d settings, first %+v, last %+v", len(g), g[0], g[35])
	}
	seen := map[string]bool{}
	for _, k := range g {
		if seen[k.Label()] {
			t.Fatalf("label %q twice", k.Label())
		}
		seen[k.Label()] = true
	}
	if !seen[DefaultKVSetting.Label()] || DefaultKVSetting.Label() != "kv c=1 s=1 clamp=on" {
		t.Fatalf("default %q not in the grid", DefaultKVSetting.Label())
	}
	c := KVSetting{Credit: 8, Scale: 4, Clamp: false}.Apply(DefaultConfig()).Router.Scheduler
	if c.OverlapScoreCredit != 8 || c.PrefillLoadScale != 4 || c.PrefillClamp {
		t.Fatalf("applied %+v", c)
	}
}

// TestSummarize builds outcomes by hand: the best kv setting is the lowest
// TTFT p50, then p90, a tie on both goes to the default setting; ratios
// are to the best; fast/slow counts requests on the fastest and slowest
// workers of a 1,1,2,4 fleet.
func TestSummarize(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workers = 4
	cfg.Fleet.Speeds = []float64{1, 1, 2, 4}
	scs := []Scenario{{Name: "s", Config: cfg}}
	runs := GridRuns(scs, []string{"kv", "least-loaded", "round-robin", "least-loaded"})
	if len(runs) != 38 || runs[36].Policy != "round-robin" || runs[37].Policy != "least-loaded" {
		t.Fatalf("%d runs, then %v", len(runs), runs[36:])
	}
	outs := make([]Outcome, len(runs))
	for i, r := range runs {
		outs[i].Result = report.Result{TTFTP50Ms: 100, TTFTP90Ms: 300, ITLP99Ms: 10}
		outs[i].WorkerRequests = []int{10, 10, 10, 10}
		if r.KV != nil && *r.KV == (KVSetting{4, 16, false}) {
			outs[i].Result = report.Result{TTFTP50Ms: 50, TTFTP90Ms: 200, ITLP99Ms: 20}
		}
		if r.KV != nil && (*r.KV == (KVSetting{2, 1, true}) || *r.KV == DefaultKVSetting) {
			outs[i].Result = report.Result{TTFTP50Ms: 50, TTFTP90Ms: 150, ITLP99Ms: 5} // a tie: default wins
		}
		if r.Policy == "round-robin" {
			outs[i].Result = report.Result{TTFTP50Ms: 75, TTFTP90Ms: 600, ITLP99Ms: 0}
			outs[i].WorkerRequests = []int{2, 6, 12, 20} // slow 8 of 40 over 2 workers, fast 20 over 1
			// By work the other way round: the slow pair computed 9,000
			// tokens (4,500 each), the fast one 1,500.
			outs[i].WorkerPrefillTokens = []int64{4000, 5000, 100, 1500}
		}
	}
	sums, err := Summarize(scs, runs, outs)
	if err != nil {
		t.Fatal(err)
	}
	s := sums[0]
	if s.Best != DefaultKVSetting.Label() || s.Default != "kv c=1 s=1 clamp=on" || !slices.Equal(s.Compared, []string{s.Best, "round-robin", "least-loaded"}) {
		t.Fatalf("best %q, compared %v", s.Best, s.Compared)
	}
	rr, _ := s.Row("round-robin")
	if rr.TTFTP50VsBest != 1.5 || rr.TTFTP90VsBest != 4 || rr.ITLP99VsBest != 0 {
		t.Fatalf("round-robin ratios %+v", rr)
	}
	if rr.FastShare != 0.5 || rr.SlowShare != 0.2 || math.Abs(rr.FastPerSlow-5) > 1e-12 {
		t.Fatalf("round-robin fast %v slow %v per slow %v, want 0.5, 0.2, 5", rr.FastShare, rr.SlowShare, rr.FastPerSlow)
	}
	if math.Abs(rr.FastWorkPerSlow-1500.0/4500) > 1e-12 {
		t.Fatalf("round-robin fast work per slow %v, want 1/3", rr.FastWorkPerSlow)
	}
	if k, _ := s.Row(DefaultKVSetting.Label()); k.FastWorkPerSlow != 0 {
		t.Fatalf("no work recorded, fast work per slow %v, want 0", k.FastWorkPerSlow)
	}
	k, _ := s.Row("kv c=4 s=16 clamp=off")
	if k.TTFTP90VsBest != 200.0/150 || k.ITLP99VsBest != 4 || k.Result.Policy != k.Label {
		t.Fatalf("kv row %+v", k)
	}
	// A homogeneous fleet has no fast or slow workers.
	scs[0].Config.Fleet.Speeds = []float64{2}
	sums, _ = Summarize(scs, runs, outs)
	if r, _ := sums[0].Row("round-robin"); r.FastShare != 0 || r.FastPerSlow != 0 || r.FastWorkPerSlow != 0 {
		t.Fatalf("homogeneous: %+v", r)
	}
	if _, err := Summarize(scs, runs, outs[1:]); err == nil {
		t.Fatal("mismatched outcomes accepted")
	}
}
