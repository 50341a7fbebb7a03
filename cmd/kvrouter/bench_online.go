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
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
		return 1
	}
	lc, wl := b.Load, &b.Workload
	if b.NeedsText() {
		tok, err := tokenizer.Default()
		if err != nil {
			return fail(err)
		}
		lc.Text = tok.Decode
	}
	bound, err := boundHitRatio(&b)
	if err != nil {
		return fail(err)
	}
	src, err := wl.Open()
	if err != nil {
		return fail(err)
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
	if err := writeOnline(stdout, b, out, res); err != nil {
		return fail(err)
	}
	printLoadErrors(stderr, out.Errors)
	if err := writeOnlinePlots(stderr, b, out, res); err != nil {
		return fail(err)
	}
	if runErr != nil {
		return fail(runErr)
	}
	if res.Failed > 0 {
		return 1
	}
	return 0
}

// boundHitRatio is the best hit ratio a shared LRU cache of
// --bound-workers × --bound-blocks could reach on the workload (0 when
// not asked for). It opens b.Workload, which keeps a trace it reads.
func boundHitRatio(b *config.BenchOnline) (float64, error) {
	if b.BoundWorkers <= 0 {
		return 0, nil
	}
	src, err := b.Workload.Open()
	if err != nil {
		return 0, err
	}
	if b.Load.MaxRequests > 0 {
		src = workload.NewSlice(workload.Collect(src, b.Load.MaxRequests), src.Concurrency())
	}
	bd, err := workload.ComputeBound(src, b.BoundBlockSize, b.BoundWorkers*b.BoundBlocks)
	if err != nil {
		return 0, err
	}
	return bd.HitRatio(), nil
}

// writeOnline writes the run's result as JSON or a table.
func writeOnline(stdout io.Writer, b config.BenchOnline, out loadgen.Outcome, res report.Result) error {
	if b.JSON {
		return report.WriteJSON(stdout, []report.Result{res})
	}
	fmt.Fprintf(stdout, "workload: %s, %s, %d issued, %d cancelled, %v wall\n", b.Workload.Name(), b.Load.URL, out.Issued, out.Cancelled, out.Wall.Round(time.Millisecond))
	if err := report.WriteTable(stdout, []report.Result{res}); err != nil {
		return err
	}
	if len(out.Workers) > 1 {
		fmt.Fprintf(stdout, "workers: %v\n", out.Workers)
	}
	return nil
}

// printLoadErrors lists the run's errors by message, counted.
func printLoadErrors(stderr io.Writer, errs map[string]int) {
	msgs := make([]string, 0, len(errs))
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	for _, m := range msgs {
		fmt.Fprintf(stderr, "errors: %d × %s\n", errs[m], m)
	}
}

// writeOnlinePlots writes the run's plots into --plot-dir, if set and
// anything was measured.
func writeOnlinePlots(stderr io.Writer, b config.BenchOnline, out loadgen.Outcome, res report.Result) error {
	if b.PlotDir == "" || res.Requests == 0 {
		return nil
	}
	paths, err := report.WritePlots(b.PlotDir, []report.Result{res}, []report.Sample{{Name: b.Name, Values: out.TTFTs}}, []report.WorkerLoad{out.Load})
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Fprintf(stderr, "wrote %s\n", p)
	}
	return nil
}
