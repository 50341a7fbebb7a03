package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/indexbench"
	"github.com/kvrouter/kvrouter/internal/trace"
)

const benchIndexSummary = "Time the prefix index on a replayed trace: apply rate, query latency, memory per entry and reads during writes."

var benchIndexUsage = helpText(benchIndexSummary, "kvrouter bench index [flags]",
	`Replays a Mooncake trace over simulated LRU workers. The one-writer apply rate is over the whole
stream on a fresh index whose workers are reserved at their capacity first (as the router does
when a worker joins); the second-half rate of the same run is the steady state.`)

func runBenchIndex(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	b, _, code, ok := load[config.BenchIndex]("bench index", benchIndexUsage, args, config.DefaultBenchIndex, stdout, stderr)
	if !ok {
		return code
	}
	cfg := b.Stream
	reqs, err := trace.Load(b.Trace)
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
	if !b.JSON {
		fmt.Fprintf(stderr, "workload: %d requests, %d events, %d block-ops over %d workers (built in %v)\n",
			len(s.Queries), len(s.Events), s.BlockOps, s.Workers, time.Since(t0).Round(time.Millisecond))
	}
	r, err := indexbench.Run(ctx, s, b.Run)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter bench index: %v\n", err)
		return 1
	}
	if b.JSON {
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
