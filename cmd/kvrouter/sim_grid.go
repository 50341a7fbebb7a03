package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/sim"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// gridPlotFile is the grid's TTFT CDF plot, one panel per scenario.
const gridPlotFile = "grid_ttft_cdf.png"

// gridScenario is a scenario with its workload.
type gridScenario struct {
	sim.Scenario
	open  func() (workload.Source, error)
	bound float64
}

// runSimGrid is `kvrouter sim --grid`.
func runSimGrid(ctx context.Context, s *config.Sim, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kvrouter sim: %v\n", err)
		return 1
	}
	for _, p := range s.PolicyList() {
		if err := sim.CheckPolicy(s.Sim, p); err != nil {
			return fail(err)
		}
	}
	scs, err := gridScenarios(s)
	if err != nil {
		return fail(err)
	}
	plain := make([]sim.Scenario, len(scs))
	for i := range scs {
		plain[i] = scs[i].Scenario
	}
	runs := sim.GridRuns(plain, s.PolicyList())
	start := time.Now()
	outs, err := runGrid(ctx, scs, runs, s.Grid.Parallel, stderr)
	if err != nil {
		return fail(err)
	}
	sums, err := sim.Summarize(plain, runs, outs)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, "grid: %d simulations in %.0f s (--parallel %d)\n", len(runs), time.Since(start).Seconds(), s.Grid.Parallel)
	if s.JSON {
		err = writeGridJSON(stdout, sums)
	} else {
		err = writeGridTables(stdout, sums)
	}
	if err != nil {
		return fail(err)
	}
	if s.PlotDir != "" {
		path, err := writeGridPlot(s.PlotDir, sums)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
	}
	return 0
}

// gridScenarios is every fleet of --grid-fleets (or the --worker-speeds
// fleet) at every speed of --grid-replay (or the workload as given), each
// with its bound.
func gridScenarios(s *config.Sim) ([]gridScenario, error) {
	wl := s.Workload
	if _, err := wl.Open(); err != nil { // reads a trace once, for every copy below
		return nil, err
	}
	replays := s.Grid.Replay
	if len(replays) == 0 {
		replays = []float64{1}
	}
	fleets := s.Grid.Fleets
	if len(fleets) == 0 {
		fleets = []sim.FleetSpeeds{{Name: fleetName(s.Sim.Fleet.Speeds), Speeds: s.Sim.Fleet.Speeds}}
	}
	var out []gridScenario
	for _, f := range fleets {
		for _, r := range replays {
			cfg := s.SimConfig() // the admission queue too, when its flags are set
			cfg.Fleet.Speeds = f.Speeds
			if err := cfg.Validate(); err != nil {
				return nil, fmt.Errorf("fleet %s: %w", f.Name, err)
			}
			name, open := replayed(wl, r)
			src, err := open()
			if err != nil {
				return nil, err
			}
			b, err := workload.ComputeBound(src, cfg.Engine.BlockSize, cfg.TotalBlocks())
			if err != nil {
				return nil, err
			}
			sc := sim.Scenario{Name: name + ", fleet " + f.Name, Fleet: f.Name, Replay: r, Config: cfg}
			out = append(out, gridScenario{Scenario: sc, open: open, bound: b.HitRatio()})
		}
	}
	return out, nil
}

// fleetName labels a fleet by its speeds: "uniform" when they are all
// alike, else the list.
func fleetName(speeds []float64) string {
	for _, v := range speeds {
		if v != speeds[0] {
			parts := make([]string, len(speeds))
			for i, v := range speeds {
				parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
			return strings.Join(parts, ",")
		}
	}
	if len(speeds) > 0 && speeds[0] != 1 {
		return "uniform ×" + strconv.FormatFloat(speeds[0], 'g', -1, 64)
	}
	return "uniform"
}

// replayed is the workload at replay speed r: a trace replays r times its
// --speedup; any other workload goes through workload.Faster.
func replayed(wl workload.Options, r float64) (string, func() (workload.Source, error)) {
	if wl.Kind == workload.KindTrace {
		wl.Mooncake.Speedup *= r
		return wl.Name(), wl.Open
	}
	name := wl.Name()
	if r != 1 {
		name += " ×" + strconv.FormatFloat(r, 'g', -1, 64)
	}
	return name, func() (workload.Source, error) {
		src, err := wl.Open()
		if err != nil {
			return nil, err
		}
		return workload.Faster(src, r)
	}
}

// runGrid runs every simulation, parallel at a time, each on a fresh
// source; outs[i] is runs[i]'s, whatever the order they finish in.
func runGrid(ctx context.Context, scs []gridScenario, runs []sim.GridRun, parallel int, stderr io.Writer) ([]sim.Outcome, error) {
	outs := make([]sim.Outcome, len(runs))
	errs := make([]error, len(runs))
	var mu sync.Mutex
	next, done := 0, 0
	start := time.Now()
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(runs) || ctx.Err() != nil {
					return
				}
				run := runs[i]
				sc := scs[run.Scenario]
				src, err := sc.open()
				if err == nil {
					outs[i], err = sim.Run(run.Config, run.Policy, src, sc.bound, nil)
					outs[i].Load = report.WorkerLoad{} // not plotted: do not keep it
				}
				if err != nil {
					errs[i] = fmt.Errorf("%s, %s: %w", sc.Name, run.Label(), err)
				}
				mu.Lock()
				done++
				fmt.Fprintf(stderr, "grid [%d/%d %.0f s] %s: %s: ttft p50 %.1f ms\n", done, len(runs), time.Since(start).Seconds(),
					sc.Name, run.Label(), outs[i].Result.TTFTP50Ms)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return outs, errors.Join(errs...)
}

// writeGridTables prints, per scenario, the kv grid's TTFT p50/p90 as a
// matrix and the comparison table of the best kv setting, kv's default
// setting, round-robin and the other policies.
func writeGridTables(w io.Writer, sums []sim.GridSummary) error {
	for i, s := range sums {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "scenario: %s (%d workers)\n", s.Name, s.Config.Workers)
		if err := writeGridMatrix(w, s); err != nil {
			return err
		}
		fmt.Fprintf(w, "best kv setting (lowest TTFT p50, then p90): %s\n", s.Best)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\treqs\tfail\tttft p50\tp90\titl p99\thit/bound\tbusiest\tfast/slow\tfast/slow\tp50÷best\tp90÷best\titl p99÷best\t")
		fmt.Fprintln(tw, "\t\t\tms\tms\tms\t\tshare\trequests\tprefill tokens\t\t\t\t")
		for _, label := range s.Compared {
			r, _ := s.Row(label)
			name := label
			switch {
			case label == s.Best:
				name += " (best)"
			case label == s.Default:
				name += " (default)"
			}
			fs, fw := "n/a", "n/a"
			if r.FastPerSlow > 0 {
				fs = fmt.Sprintf("%.2f", r.FastPerSlow)
			}
			if r.FastWorkPerSlow > 0 {
				fw = fmt.Sprintf("%.2f", r.FastWorkPerSlow)
			}
			res := r.Result
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.3f\t%.3f\t%s\t%s\t%.3f\t%.3f\t%.3f\t\n", name, res.Requests, res.Failed,
				res.TTFTP50Ms, res.TTFTP90Ms, res.ITLP99Ms, res.HitRatioOverBound, res.MaxWorkerShare, fs, fw,
				r.TTFTP50VsBest, r.TTFTP90VsBest, r.ITLP99VsBest)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	return nil
}

// writeGridMatrix prints the kv grid's TTFT p50 / p90 in ms: one row per
// credit, one column per prefill load scale and clamp.
func writeGridMatrix(w io.Writer, s sim.GridSummary) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "kv ttft p50/p90 ms\t")
	for _, sc := range sim.GridScales {
		for _, cl := range sim.GridClamps {
			on := "on"
			if !cl {
				on = "off"
			}
			fmt.Fprintf(tw, "s=%g clamp=%s\t", sc, on)
		}
	}
	fmt.Fprintln(tw)
	for _, c := range sim.GridCredits {
		fmt.Fprintf(tw, "c=%g\t", c)
		for _, sc := range sim.GridScales {
			for _, cl := range sim.GridClamps {
				r, _ := s.Row(sim.KVSetting{Credit: c, Scale: sc, Clamp: cl}.Label())
				fmt.Fprintf(tw, "%.0f/%.0f\t", r.Result.TTFTP50Ms, r.Result.TTFTP90Ms)
			}
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing grid: %w", err)
	}
	return nil
}

// writeGridJSON prints {"scenarios": [...]}, every run of every scenario
// with its ratios to the best kv setting.
func writeGridJSON(w io.Writer, sums []sim.GridSummary) error {
	for i := range sums {
		for j := range sums[i].Rows {
			sums[i].Rows[j].Result = report.Finite(sums[i].Rows[j].Result)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(struct {
		Scenarios []sim.GridSummary `json:"scenarios"`
	}{sums}); err != nil {
		return fmt.Errorf("writing json: %w", err)
	}
	return nil
}

// writeGridPlot draws the TTFT CDFs of the compared rows, one panel per
// scenario; each role keeps its colour in every panel (best kv, kv
// default, round-robin, the others in order).
func writeGridPlot(dir string, sums []sim.GridSummary) (string, error) {
	var panels []report.Panel
	def := sim.DefaultKVSetting.Label()
	for _, s := range sums {
		series := func(label string) []float64 {
			for i, r := range s.Rows {
				if r.Label == label {
					return s.TTFTs[i]
				}
			}
			return nil
		}
		best := report.Sample{Name: "kv best: " + strings.TrimPrefix(s.Best, "kv "), Values: series(s.Best)}
		dflt := report.Sample{Name: "kv default: " + strings.TrimPrefix(def, "kv "), Values: series(def)}
		if s.Best == def {
			best.Name, dflt.Values = "kv best = default: "+strings.TrimPrefix(def, "kv "), nil
		}
		pn := report.Panel{Title: s.Name, Series: []report.Sample{best, dflt}}
		for _, r := range s.Rows {
			if r.KV == nil {
				pn.Series = append(pn.Series, report.Sample{Name: r.Label, Values: series(r.Label)})
			}
		}
		panels = append(panels, pn)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating plot dir: %w", err)
	}
	path := filepath.Join(dir, gridPlotFile)
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("creating plot: %w", err)
	}
	err = report.WriteTTFTCDFPanels(f, "Time to first token, CDF per policy (kv: the grid's best setting and the default)", panels)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing plot: %w", cerr)
	}
	return path, err
}

// fleetLine describes the per-worker lists of a heterogeneous fleet for
// the table's header ("" when there are none).
func fleetLine(cfg sim.Config) string {
	var parts []string
	for _, l := range []struct {
		name string
		n    int
		text func() string
	}{
		{"speeds", len(cfg.Fleet.Speeds), func() string { return fmt.Sprint(cfg.Fleet.Speeds) }},
		{"batch tokens", len(cfg.Fleet.BatchTokens), func() string { return fmt.Sprint(cfg.Fleet.BatchTokens) }},
		{"KV blocks", len(cfg.Fleet.KVBlocks), func() string { return fmt.Sprint(cfg.Fleet.KVBlocks) }},
	} {
		if l.n > 0 {
			parts = append(parts, l.name+" "+l.text())
		}
	}
	if len(cfg.SpeedChanges) > 0 {
		parts = append(parts, fmt.Sprintf("%d speed changes", len(cfg.SpeedChanges)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}
