package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/sim"
	"github.com/kvrouter/kvrouter/internal/workload"
)

func init() {
	register("sim", command{summary: "simulate a fleet offline and compare routing policies", run: runSim})
}

func runSim(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := sim.DefaultConfig()
	wl := workload.DefaultOptions()
	wl.RegisterFlags(fs)
	policies := fs.String("policy", "kv,round-robin,random,least-loaded", "comma-separated policies: kv, round-robin, random, least-loaded, oracle (diagnostic: longest real cached prefix, no load term)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of mock engines")
	fs.IntVar(&cfg.Engine.BlockSize, "block-size", cfg.Engine.BlockSize, "KV block size in tokens")
	fs.IntVar(&cfg.Engine.NumGPUBlocks, "num-gpu-blocks", cfg.Engine.NumGPUBlocks, "KV blocks per engine")
	fs.Float64Var(&cfg.Engine.SpeedupRatio, "speedup-ratio", cfg.Engine.SpeedupRatio, "divide every modelled engine duration")
	fs.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "max running requests per engine")
	fs.IntVar(&cfg.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.Engine.MaxNumBatchedTokens, "token budget per engine step")
	fs.Float64Var(&cfg.Router.Scheduler.Temperature, "router-temperature", cfg.Router.Scheduler.Temperature, "kv policy softmax temperature (0: argmin)")
	fs.Float64Var(&cfg.Router.Scheduler.OverlapScoreCredit, "kv-overlap-score-credit", cfg.Router.Scheduler.OverlapScoreCredit, "credit per cached block")
	fs.Float64Var(&cfg.Router.Scheduler.PrefillLoadScale, "router-prefill-load-scale", cfg.Router.Scheduler.PrefillLoadScale, "weight of prefill load")
	fs.BoolVar(&cfg.Router.Scheduler.PrefillClamp, "router-prefill-clamp", cfg.Router.Scheduler.PrefillClamp, "floor the adjusted prefill at 0 (DESIGN §1); false lets a longer cached prefix keep lowering the cost at high credit")
	fs.BoolVar(&cfg.Router.Sequences.TrackActiveBlocks, "router-track-active-blocks", cfg.Router.Sequences.TrackActiveBlocks, "count running requests' KV blocks in the kv cost (the decode load term)")
	fs.BoolVar(&cfg.Approximate, "no-router-kv-events", cfg.Approximate, "workers publish no KV events (approximate index)")
	fs.Uint64Var(&cfg.Router.Seed, "seed", cfg.Router.Seed, "router seed (tie-breaks, random policy)")
	asJSON := fs.Bool("json", false, "print results as JSON (one object per policy)")
	plotDir := fs.String("plot", "", "write PNG plots into this directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvrouter sim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	var ps []string
	for _, p := range strings.Split(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			ps = append(ps, p)
		}
	}
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
	if *asJSON {
		err = report.WriteJSON(stdout, results)
	} else {
		fmt.Fprintf(stdout, "workload: %s, %d workers × %d blocks of %d tokens\n", wl.Name(), cfg.Workers, cfg.Engine.NumGPUBlocks, cfg.Engine.BlockSize)
		err = report.WriteTable(stdout, results)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter sim: %v\n", err)
		return 1
	}
	if *plotDir != "" {
		paths, err := report.WritePlots(*plotDir, results, ttfts, loads)
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
