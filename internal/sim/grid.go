package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/router"
)

// The grid: the kv policy over every combination of its three cost knobs,
// beside round-robin and any other policy, on one or more scenarios (a
// fleet and a replay speed), so that a policy that needs no tuning can be
// compared with the best tuning found for each scenario.

// KVSetting is one point of the kv grid: the scheduler's overlap credit,
// prefill load scale and prefill clamp.
type KVSetting struct {
	Credit float64 `json:"credit"`
	Scale  float64 `json:"prefill_load_scale"`
	Clamp  bool    `json:"prefill_clamp"`
}

// Label names the setting, e.g. "kv c=16 s=4 clamp=off".
func (k KVSetting) Label() string {
	clamp := "on"
	if !k.Clamp {
		clamp = "off"
	}
	return fmt.Sprintf("kv c=%s s=%s clamp=%s", strconv.FormatFloat(k.Credit, 'g', -1, 64),
		strconv.FormatFloat(k.Scale, 'g', -1, 64), clamp)
}

// Apply returns cfg with the setting's knobs in its router's scheduler.
func (k KVSetting) Apply(cfg Config) Config {
	cfg.Router.Scheduler.OverlapScoreCredit = k.Credit
	cfg.Router.Scheduler.PrefillLoadScale = k.Scale
	cfg.Router.Scheduler.PrefillClamp = k.Clamp
	return cfg
}

// Grid axes.
var (
	// GridCredits are the overlap credits of the kv grid.
	GridCredits = []float64{0.5, 1, 2, 4, 8, 16}
	// GridScales are the prefill load scales of the kv grid.
	GridScales = []float64{1, 4, 16}
	// GridClamps are the prefill clamp settings of the kv grid.
	GridClamps = []bool{true, false}
)

// KVGrid returns the 36 settings, credit-major, in a fixed order.
func KVGrid() []KVSetting {
	var g []KVSetting
	for _, c := range GridCredits {
		for _, s := range GridScales {
			for _, cl := range GridClamps {
				g = append(g, KVSetting{Credit: c, Scale: s, Clamp: cl})
			}
		}
	}
	return g
}

// DefaultKVSetting is the kv setting of the router's defaults.
var DefaultKVSetting = KVSetting{Credit: 1, Scale: 1, Clamp: true}

// FleetSpeeds names a fleet of the grid by its per-worker speeds.
type FleetSpeeds struct {
	// Name labels the fleet in tables and plots.
	Name string `json:"name"`
	// Speeds are mocker.Fleet.Speeds.
	Speeds []float64 `json:"speeds"`
}

// Scenario is one fleet under one workload at one replay speed.
type Scenario struct {
	// Name labels the scenario: workload, replay speed, fleet.
	Name string `json:"name"`
	// Fleet is the fleet's name.
	Fleet string `json:"fleet"`
	// Replay divides the workload's arrival times (workload.Faster).
	Replay float64 `json:"replay"`
	// Config is the fleet; kv runs get a grid setting on top.
	Config Config `json:"-"`
}

// GridRun is one simulation of the grid.
type GridRun struct {
	// Scenario indexes the scenario.
	Scenario int
	// Policy is the routing policy.
	Policy string
	// KV is the kv setting, nil for other policies.
	KV *KVSetting
	// Config is the scenario's fleet with the setting applied.
	Config Config
}

// Label names the run in tables: the kv setting, or the policy.
func (g GridRun) Label() string {
	if g.KV != nil {
		return g.KV.Label()
	}
	return g.Policy
}

// GridRuns lists every run: per scenario, the 36 kv settings, then
// round-robin, then each of others that is not kv or round-robin, in the
// order given (duplicates once).
func GridRuns(scenarios []Scenario, others []string) []GridRun {
	var extra []string
	for _, p := range others {
		if p != "kv" && p != "round-robin" && !slices.Contains(extra, p) {
			extra = append(extra, p)
		}
	}
	var runs []GridRun
	for i, sc := range scenarios {
		for _, k := range KVGrid() {
			runs = append(runs, GridRun{Scenario: i, Policy: "kv", KV: &k, Config: k.Apply(sc.Config)})
		}
		for _, p := range append([]string{"round-robin"}, extra...) {
			runs = append(runs, GridRun{Scenario: i, Policy: p, Config: sc.Config})
		}
	}
	return runs
}

// GridRow is one run's result in a scenario's summary.
type GridRow struct {
	// Label is GridRun.Label.
	Label string `json:"label"`
	// KV is the kv setting (nil for other policies).
	KV *KVSetting `json:"kv_setting"`
	// Result is the run's summary (its Policy is the label).
	Result report.Result `json:"result"`
	// FastShare and SlowShare are the fractions of requests served by the
	// fastest and by the slowest workers (by starting speed); both 0 on a
	// homogeneous fleet.
	FastShare float64 `json:"fast_share"`
	SlowShare float64 `json:"slow_share"`
	// FastPerSlow is requests per fastest worker over requests per
	// slowest worker (above 1: the fast workers carry more); 0 on a
	// homogeneous fleet or when the slow ones served nothing.
	FastPerSlow float64 `json:"fast_per_slow"`
	// FastWorkPerSlow is the same ratio by work: uncached prompt tokens
	// computed per fastest worker over those per slowest worker (0 on a
	// homogeneous fleet or when the slow ones computed none). A policy
	// that gives the fast workers the long prefills and the slow ones the
	// cache hits has FastWorkPerSlow above FastPerSlow.
	FastWorkPerSlow float64 `json:"fast_work_per_slow"`
	// TTFTP50VsBest, TTFTP90VsBest and ITLP99VsBest are the row's TTFT
	// p50, p90 and ITL p99 over the best kv setting's (0 where that is 0).
	TTFTP50VsBest float64 `json:"ttft_p50_vs_best"`
	TTFTP90VsBest float64 `json:"ttft_p90_vs_best"`
	ITLP99VsBest  float64 `json:"itl_p99_vs_best"`
}

// GridSummary is one scenario's grid.
type GridSummary struct {
	Scenario
	// Speeds are the fleet's starting per-worker speeds (empty: all 1).
	Speeds []float64 `json:"speeds"`
	// Best is the best kv setting: lowest TTFT p50, then p90; of settings
	// that tie on both, the default one, else the first in grid order.
	Best string `json:"best_kv"`
	// Default is the label of kv's default setting (DefaultKVSetting),
	// so that a reader of the JSON can hold it fixed across scenarios.
	Default string `json:"default_kv"`
	// Compared are the labels of the comparison table, in order: the best
	// kv setting, kv's default setting, round-robin, the other policies.
	Compared []string `json:"compared"`
	// Rows are every run, in GridRuns order.
	Rows []GridRow `json:"rows"`
	// TTFTs are each row's TTFTs in ms, for the CDF plot.
	TTFTs [][]float64 `json:"-"`
}

// Row returns the row labelled label.
func (s GridSummary) Row(label string) (GridRow, bool) {
	for _, r := range s.Rows {
		if r.Label == label {
			return r, true
		}
	}
	return GridRow{}, false
}

// Summarize groups the outcomes of runs (outs[i] is runs[i]'s) by
// scenario, finds each scenario's best kv setting and rates every row
// against it.
func Summarize(scenarios []Scenario, runs []GridRun, outs []Outcome) ([]GridSummary, error) {
	if len(runs) != len(outs) {
		return nil, fmt.Errorf("%d runs, %d outcomes", len(runs), len(outs))
	}
	sums := make([]GridSummary, len(scenarios))
	for i, sc := range scenarios {
		sums[i] = GridSummary{Scenario: sc, Speeds: sc.Config.Fleet.Speeds}
	}
	for i, run := range runs {
		if run.Scenario < 0 || run.Scenario >= len(sums) {
			return nil, fmt.Errorf("run %d: scenario %d out of range", i, run.Scenario)
		}
		s := &sums[run.Scenario]
		res := outs[i].Result
		res.Policy = run.Label()
		row := GridRow{Label: run.Label(), KV: run.KV, Result: res}
		row.FastShare, row.SlowShare, row.FastPerSlow = fastSlow(s.Config, outs[i].WorkerRequests)
		_, _, row.FastWorkPerSlow = fastSlow(s.Config, outs[i].WorkerPrefillTokens)
		s.Rows = append(s.Rows, row)
		s.TTFTs = append(s.TTFTs, outs[i].TTFTs)
	}
	for i := range sums {
		s := &sums[i]
		best := -1
		for j, r := range s.Rows {
			if r.KV == nil {
				continue
			}
			if best < 0 {
				best = j
				continue
			}
			a, b := r.Result, s.Rows[best].Result
			tie := a.TTFTP50Ms == b.TTFTP50Ms && a.TTFTP90Ms == b.TTFTP90Ms
			if a.TTFTP50Ms < b.TTFTP50Ms || (a.TTFTP50Ms == b.TTFTP50Ms && a.TTFTP90Ms < b.TTFTP90Ms) || (tie && *r.KV == DefaultKVSetting) {
				best = j
			}
		}
		if best < 0 {
			return nil, fmt.Errorf("scenario %s: no kv run", s.Name)
		}
		b := s.Rows[best].Result
		s.Best = s.Rows[best].Label
		for j := range s.Rows {
			r := &s.Rows[j]
			r.TTFTP50VsBest = ratio(r.Result.TTFTP50Ms, b.TTFTP50Ms)
			r.TTFTP90VsBest = ratio(r.Result.TTFTP90Ms, b.TTFTP90Ms)
			r.ITLP99VsBest = ratio(r.Result.ITLP99Ms, b.ITLP99Ms)
		}
		s.Default = DefaultKVSetting.Label()
		s.Compared = []string{s.Best}
		if s.Default != s.Best {
			s.Compared = append(s.Compared, s.Default)
		}
		for _, r := range s.Rows {
			if r.KV == nil {
				s.Compared = append(s.Compared, r.Label)
			}
		}
	}
	return sums, nil
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// fastSlow returns the shares of perWorker's total (requests, or tokens)
// on the fastest and on the slowest workers and the per-worker ratio of
// the two.
func fastSlow[N int | int64](cfg Config, perWorker []N) (fast, slow, perSlow float64) {
	if !cfg.Fleet.Heterogeneous() || len(perWorker) != cfg.Workers {
		return 0, 0, 0
	}
	lo, hi := slices.Min(cfg.Fleet.Speeds), slices.Max(cfg.Fleet.Speeds)
	var nf, ns int
	var rf, rs, total float64
	for i, n := range perWorker {
		total += float64(n)
		switch cfg.Fleet.Speed(i) {
		case hi:
			nf, rf = nf+1, rf+float64(n)
		case lo:
			ns, rs = ns+1, rs+float64(n)
		}
	}
	if total == 0 {
		return 0, 0, 0
	}
	fast, slow = rf/total, rs/total
	if rs > 0 {
		perSlow = (rf / float64(nf)) / (rs / float64(ns))
	}
	return fast, slow, perSlow
}

// ScenarioName labels a scenario: "trace conversation ×1, replay ×4,
// fleet half-fast".
func ScenarioName(workload string, replay float64, fleet string) string {
	parts := []string{workload}
	if replay != 1 {
		parts = append(parts, "replay ×"+strconv.FormatFloat(replay, 'g', -1, 64))
	}
	if fleet != "" {
		parts = append(parts, "fleet "+fleet)
	}
	return strings.Join(parts, ", ")
}

// CheckPolicy reports a policy the router (or the simulator) does not
// know, before a long grid starts.
func CheckPolicy(cfg Config, policy string) error {
	if policy == PolicyOracle {
		return nil
	}
	rcfg := cfg.Router
	rcfg.Policy, rcfg.BlockSize = policy, cfg.Engine.BlockSize
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		return fmt.Errorf("building index: %w", err)
	}
	if _, err := router.New(rcfg, router.NewSerial(x), func() time.Time { return time.Unix(0, 0) }, nil); err != nil {
		return fmt.Errorf("policy %s: %w", policy, err)
	}
	return nil
}
