package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/sim"
	"github.com/kvrouter/kvrouter/internal/workload"
)

const simSummary = "Simulate a fleet of mock engines offline, faster than real time, and compare routing policies on a workload."

func init() {
	register("sim", command{summary: simSummary, run: runSim})
}

var simUsage = helpText(simSummary, "kvrouter sim [flags]",
	`Replays the workload (--workload and its options, the same as 'kvrouter bench') once per --policy
on simulated engines with the router's own core in the loop, and prints one result row per policy:
cache hit ratio, TTFT, ITL and end-to-end latency in modelled time. --worker-speeds,
--worker-batch-tokens and --worker-kv-blocks make the fleet heterogeneous, --worker-speed-change
changes speeds mid-run. --grid runs kv over its cost knobs (36 settings) beside round-robin and the
other --policy names, per scenario (--grid-fleets × --grid-replay), and prints each policy against
the best kv setting (--json for scripts, --plot for the TTFT CDFs); the --router-queue-* and
--router-tenant-* flags model the admission queue in every run, the grid's too.`)

func runSim(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	s, _, code, ok := load[config.Sim]("sim", simUsage, args, config.DefaultSim, stdout, stderr)
	if !ok {
		return code
	}
	if s.Grid.On {
		return runSimGrid(ctx, &s, stdout, stderr)
	}
	cfg, wl, ps := s.SimConfig(), &s.Workload, s.PolicyList()
	open := func() (workload.Source, error) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return wl.Open()
	}
	prog := func(policy string, total int) report.Progress {
		return report.NewProgress(stderr, report.ProgressConfig{What: policy, Total: total})
	}
	outs, err := sim.Compare(cfg, ps, open, prog)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter sim: %v\n", err)
		return 1
	}
	results := make([]report.Result, len(outs))
	var ttfts []report.Sample
	var loads []report.WorkerLoad
	for i, o := range outs {
		results[i] = o.Result
		results[i].Workload = wl.Name()
		ttfts = append(ttfts, report.Sample{Name: o.Result.Policy, Values: o.TTFTs})
		loads = append(loads, o.Load)
	}
	if s.JSON {
		err = report.WriteJSON(stdout, results)
	} else {
		fmt.Fprintf(stdout, "workload: %s, %d workers × %d blocks of %d tokens%s\n", wl.Name(), cfg.Workers, cfg.Engine.NumGPUBlocks, cfg.Engine.BlockSize, fleetLine(cfg))
		if cfg.PrefillWorkers > 0 {
			for _, o := range outs {
				fmt.Fprintf(stdout, "disaggregated (%s): %d prefill + %d decode engines, %d requests bypassed (--pd-bypass-tokens %d), %d KV blocks transferred\n",
					o.Result.Policy, cfg.PrefillWorkers, cfg.DecodeWorkers, o.Bypassed, cfg.BypassTokens, o.TransferredBlocks)
			}
		}
		err = report.WriteTable(stdout, results)
		for _, o := range outs {
			if o.PredictionRatio > 0 {
				fmt.Fprintf(stdout, "%s: predicted ÷ actual TTFT of the chosen worker %.2f (geometric mean)\n", o.Result.Policy, o.PredictionRatio)
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter sim: %v\n", err)
		return 1
	}
	if !s.JSON {
		writeGoodput(stdout, outs, s.SLO)
	}
	if s.PlotDir != "" {
		paths, err := report.WritePlots(s.PlotDir, results, ttfts, loads)
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter sim: %v\n", err)
			return 1
		}
		for _, p := range paths {
			fmt.Fprintf(stderr, "wrote %s\n", p)
		}
	}
	return 0
}

// writeGoodput prints, per policy, the requests whose TTFT met slo, the
// refused ones and what the admission queue did.
func writeGoodput(w io.Writer, outs []sim.Outcome, slo time.Duration) {
	for _, o := range outs {
		r, q := o.Result, o.Queue
		n := r.Requests + r.Failed
		fmt.Fprintf(w, "%s: goodput (TTFT ≤ %v) %d of %d (%.1f %%), refused %d", r.Policy, slo, o.Goodput(slo), n,
			100*float64(o.Goodput(slo))/float64(max(n, 1)), r.Failed)
		if q.Queued > 0 {
			fmt.Fprintf(w, "; queued %d, timed out %d, late %d, queue full %d, longest queue %d, mean wait %v", q.Queued, q.TimedOut, q.Late, q.Refused,
				q.MaxDepth, (q.Wait / time.Duration(q.Queued)).Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
}
