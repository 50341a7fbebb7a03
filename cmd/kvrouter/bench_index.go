package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/internal/indexbench"
	"github.com/kvrouter/kvrouter/internal/trace"
)

func runBenchIndex(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench index", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d, rd := indexbench.DefaultConfig(), indexbench.DefaultRunConfig()
	tr := fs.String("trace", "conversation", "Mooncake trace: an embedded name (conversation, synthetic) or a file path")
	blockSize := fs.Int("block-size", d.BlockSize, "engine KV block size in tokens")
	workers := fs.Int("workers", d.Workers, "number of simulated workers")
	workerBlocks := fs.Int("worker-blocks", d.WorkerBlocks, "KV cache capacity of each worker in blocks (LRU)")
	requests := fs.Int("requests", 0, "use only the first N trace rows (0 = all)")
	queries := fs.Int("queries", rd.Queries, "number of individually timed queries")
	writers := fs.Int("writers", rd.Writers, "writer goroutines of the concurrent index")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: kvrouter bench index [flags]")
		fmt.Fprintln(stderr, "Replays a Mooncake trace over simulated LRU workers and measures the prefix index:")
		fmt.Fprintln(stderr, "apply rate, query latency, memory per (worker, block) entry, reads during writes.")
		fmt.Fprintln(stderr, "The one-writer apply rate is over the whole stream on a fresh index whose workers")
		fmt.Fprintln(stderr, "are reserved at their capacity first (index.Reserve, as the router does when a worker")
		fmt.Fprintln(stderr, "joins); the second-half rate of the same run is the steady state.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kvrouter bench index: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg := indexbench.Config{BlockSize: *blockSize, Workers: *workers, WorkerBlocks: *workerBlocks, MaxRequests: *requests}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvrouter bench index: %v\n", err)
		return 2
	}
	if *queries <= 0 || *writers <= 0 {
		fmt.Fprintln(stderr, "kvrouter bench index: --queries and --writers must be positive")
		return 2
	}
	reqs, err := trace.Load(*tr)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench index: %v\n", err)
		return 1
	}
	t0 := time.Now()
	s, err := indexbench.Build(reqs, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench index: building the workload: %v\n", err)
		return 1
	}
	if !*asJSON {
		fmt.Fprintf(stderr, "workload: %d requests, %d events, %d block-ops over %d workers (built in %v)\n",
			len(s.Queries), len(s.Events), s.BlockOps, s.Workers, time.Since(t0).Round(time.Millisecond))
	}
	r, err := indexbench.Run(ctx, s, indexbench.RunConfig{Writers: *writers, Queries: *queries})
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench index: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "kvrouter bench index: %v\n", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stdout, "apply, one writer          %12.0f block-ops/s   (whole stream, fresh index; target >= 10 M; %.0f per CPU-second; load average %.1f)\n",
		r.BlockOpsPerSec, r.BlockOpsPerCPUSec, r.LoadAvg1m)
	fmt.Fprintf(stdout, "  second half of the stream %12.0f block-ops/s   (same run, tables grown and caches full; %.0f per CPU-second)\n",
		r.SecondHalfBlockOpsPerSec, r.SecondHalfBlockOpsPerCPUSec)
	fmt.Fprintf(stdout, "apply, %d writers           %12.0f block-ops/s\n", r.Writers, r.ConcurrentBlockOpsPerSec)
	fmt.Fprintf(stdout, "query latency p50/p99/p999 %8.2f / %.2f / %.2f µs   (whole requests; mean %.1f blocks matched, %.2f µs CPU)\n",
		r.QueryP50us, r.QueryP99us, r.QueryP999us, r.QueryMeanDepth, r.QueryCPUMeanus)
	fmt.Fprintf(stdout, "  cut to 256 blocks p50/p99 %8.2f / %.2f µs   (target p99 <= 10; %.2f µs CPU mean)\n",
		r.Query256P50us, r.Query256P99us, r.Query256CPUMeanus)
	fmt.Fprintf(stdout, "memory                     %12.1f B per entry (%d entries, %d nodes, %d heap bytes; target <= 64)\n",
		r.BytesPerEntry, r.Entries, r.Nodes, r.HeapBytes)
	fmt.Fprintf(stdout, "1 reader while writing     %12.0f queries/s, %.0f block-ops/s\n", r.QueriesPerSec1Reader, r.BlockOpsPerSec1Reader)
	fmt.Fprintf(stdout, "2 readers while writing    %12.0f queries/s, %.0f block-ops/s\n", r.QueriesPerSec2Readers, r.BlockOpsPerSec2Readers)
	return 0
}
