package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/loadgen"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/workload"
)

const benchOnlineSummary = "Send a workload to any OpenAI-compatible server, streaming, and measure TTFT, inter-token and end-to-end latency and errors client-side."

func init() {
	benchSubs["online"] = struct {
		summary string
		run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
	}{"send a workload to an OpenAI endpoint and measure TTFT, ITL, e2e (the default)", runBenchOnline}
}

var benchOnlineUsage = helpText(benchOnlineSummary, "kvrouter bench [online] --url URL [flags]",
	`The workload takes the same --workload flags as 'kvrouter sim'. Open loop at the workload's
arrival times by default; --closed-loop N keeps N requests in flight. --bound-workers computes the
best hit ratio a shared LRU cache of that size could reach on the workload, for comparison.`)

func runBenchOnline(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	b, _, code, ok := load[config.BenchOnline]("bench online", benchOnlineUsage, args, config.DefaultBenchOnline, stdout, stderr)
	if !ok {
		return code
	}
	lc, wl := b.Load, &b.Workload
	if b.NeedsText() {
		tok, err := tokenizer.Default()
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		lc.Text = tok.Decode
	}
	bound := 0.0
	if b.BoundWorkers > 0 {
		src, err := wl.Open()
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		if lc.MaxRequests > 0 {
			src = workload.NewSlice(workload.Collect(src, lc.MaxRequests), src.Concurrency())
		}
		bd, err := workload.ComputeBound(src, b.BoundBlockSize, b.BoundWorkers*b.BoundBlocks)
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		bound = bd.HitRatio()
	}
	src, err := wl.Open()
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
		return 1
	}
	total := src.Len()
	if lc.MaxRequests > 0 {
		total = min(total, lc.MaxRequests)
	}
	prog := report.NewProgress(stderr, report.ProgressConfig{What: b.Name, Total: total})
	out, runErr := loadgen.Run(ctx, lc, src, b.Name, prog)
	res := out.Result
	res.Workload = wl.Name()
	res.BoundHitRatio = bound
	if bound > 0 {
		res.HitRatioOverBound = res.HitRatio / bound
	}
	if b.JSON {
		err = report.WriteJSON(stdout, []report.Result{res})
	} else {
		fmt.Fprintf(stdout, "workload: %s, %s, %d issued, %d cancelled, %v wall\n", wl.Name(), lc.URL, out.Issued, out.Cancelled, out.Wall.Round(time.Millisecond))
		err = report.WriteTable(stdout, []report.Result{res})
		if err == nil && len(out.Workers) > 1 {
			fmt.Fprintf(stdout, "workers: %v\n", out.Workers)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
		return 1
	}
	msgs := make([]string, 0, len(out.Errors))
	for m := range out.Errors {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	for _, m := range msgs {
		fmt.Fprintf(stderr, "errors: %d × %s\n", out.Errors[m], m)
	}
	if b.PlotDir != "" && res.Requests > 0 {
		paths, err := report.WritePlots(b.PlotDir, []report.Result{res}, []report.Sample{{Name: b.Name, Values: out.TTFTs}}, []report.WorkerLoad{out.Load})
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		for _, p := range paths {
			fmt.Fprintf(stderr, "wrote %s\n", p)
		}
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "kvrouter bench: %v\n", runErr)
		return 1
	}
	if res.Failed > 0 {
		return 1
	}
	return 0
}
