package main

import (
	"context"
	"fmt"
	"io"
	"sort"
)

const benchSummary = "Measure kvrouter: drive an OpenAI endpoint with a workload (bench online, the default) or time the prefix index (bench index)."

func init() {
	register("bench", command{summary: benchSummary, run: runBench})
}

// benchSubs are the benchmarks `kvrouter bench <sub>` runs; each takes the
// arguments after its name.
var benchSubs = map[string]struct {
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}{
	"index": {"prefix index: apply rate, query latency, memory per entry", runBenchIndex},
}

func runBench(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		benchUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		benchUsage(stdout)
		return 0
	}
	sub, ok := benchSubs[args[0]]
	if !ok && len(args[0]) > 1 && args[0][0] == '-' {
		return runBenchOnline(ctx, args, stdin, stdout, stderr) // flags first: the default, online
	}
	if !ok {
		fmt.Fprintf(stderr, "kvrouter bench: unknown benchmark %q\nRun 'kvrouter bench --help' for the benchmarks.\n", args[0])
		return 2
	}
	return sub.run(ctx, args[1:], stdin, stdout, stderr)
}

func benchUsage(w io.Writer) {
	fmt.Fprintln(w, benchSummary+"\n\nUsage: kvrouter bench [<benchmark>] [flags]\n\nBenchmarks:")
	names := make([]string, 0, len(benchSubs))
	for n := range benchSubs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, benchSubs[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'kvrouter bench <benchmark> --help' for its flags.")
}
