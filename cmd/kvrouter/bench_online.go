package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/kvrouter/kvrouter/internal/loadgen"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/kvrouter/kvrouter/internal/workload"
)

func init() {
	benchSubs["online"] = struct {
		summary string
		run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
	}{"send a workload to an OpenAI endpoint and measure TTFT, ITL, e2e (the default)", runBenchOnline}
}

const benchOnlineUsage = `Usage: kvrouter bench [online] --url URL [flags]

Sends a workload (the same --workload flags as 'kvrouter sim') to any OpenAI-compatible server,
streaming, and measures TTFT, inter-token latency, end-to-end latency and errors client-side.
Open loop at the workload's arrival times by default; --concurrency N runs closed loop.`

func runBenchOnline(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench online", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, benchOnlineUsage)
		fs.PrintDefaults()
	}
	lc := loadgen.DefaultConfig()
	wl := workload.DefaultOptions()
	wl.RegisterFlags(fs)
	fs.StringVar(&lc.URL, "url", "http://127.0.0.1:8000", "server base URL (kvrouter, a worker, or any OpenAI server)")
	fs.StringVar(&lc.Model, "model", lc.Model, "model name sent with each request")
	fs.StringVar(&lc.API, "api", lc.API, "completions (token-id prompts) or chat (text prompts)")
	text := fs.Bool("text", false, "send prompts as text (decoded with the embedded Qwen3 tokenizer) instead of token ids")
	fs.IntVar(&lc.Concurrency, "closed-loop", lc.Concurrency, "closed loop with this many requests in flight (0: the workload's arrival times)")
	fs.DurationVar(&lc.Duration, "duration", lc.Duration, "stop issuing and cancel what is in flight after this wall time (0: none)")
	fs.IntVar(&lc.MaxRequests, "max-requests", lc.MaxRequests, "send at most this many requests (0: the whole workload)")
	fs.IntVar(&lc.MaxConns, "max-conns", lc.MaxConns, "bound on the client's connections to the server")
	fs.DurationVar(&lc.RequestTimeout, "request-timeout", lc.RequestTimeout, "bound on one request (0: none)")
	fs.StringVar(&lc.APIKey, "api-key", "", "bearer token, if the server wants one")
	name := fs.String("name", "online", "label of the result row")
	boundWorkers := fs.Int("bound-workers", 0, "compute the shared-LRU bound for this many workers (0: no bound)")
	boundBlocks := fs.Int("bound-num-gpu-blocks", 16384, "KV blocks per worker, for the bound")
	boundBlockSize := fs.Int("bound-block-size", 64, "KV block size in tokens, for the bound")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	plotDir := fs.String("plot", "", "write PNG plots into this directory")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvrouter bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *text || lc.API == loadgen.APIChat {
		tok, err := tokenizer.Default()
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		lc.Text = tok.Decode
	}
	if err := lc.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
		return 2
	}
	bound := 0.0
	if *boundWorkers > 0 {
		src, err := wl.Open()
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		if lc.MaxRequests > 0 {
			src = workload.NewSlice(workload.Collect(src, lc.MaxRequests), src.Concurrency())
		}
		b, err := workload.ComputeBound(src, *boundBlockSize, *boundWorkers**boundBlocks)
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter bench: %v\n", err)
			return 1
		}
		bound = b.HitRatio()
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
	prog := report.NewProgress(stderr, report.ProgressConfig{What: *name, Total: total})
	out, runErr := loadgen.Run(ctx, lc, src, *name, prog)
	res := out.Result
	res.Workload = wl.Name()
	res.BoundHitRatio = bound
	if bound > 0 {
		res.HitRatioOverBound = res.HitRatio / bound
	}
	if *asJSON {
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
	if *plotDir != "" && res.Requests > 0 {
		paths, err := report.WritePlots(*plotDir, []report.Result{res}, []report.Sample{{Name: *name, Values: out.TTFTs}}, []report.WorkerLoad{out.Load})
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
