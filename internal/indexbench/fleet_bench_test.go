package indexbench

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/trace"
)

// BenchmarkQueryFleet is `kvrouter bench index --workers N --passes P`'s
// query cut to 256 blocks, as a benchmark (so it can be profiled): the
// whole conversation trace replayed P times (P = 12 N / 1,024, at least
// 1, so that every worker's 16,384-block cache fills) over N workers,
// applied to one index, then the stream's first 20,000 requests (the
// command's --queries) queried in turn, cut to their first 256 blocks. It reports wall-clock and thread-CPU p50/p99
// per query and the scores a query returns. Building the 1,024-worker
// index takes about 20 s and 3.3 GB.
func BenchmarkQueryFleet(b *testing.B) {
	for _, workers := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			reqs, err := trace.Load("conversation")
			if err != nil {
				b.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Workers, cfg.Passes = workers, max(1, 12*workers/1024)
			s, err := Build(reqs, cfg)
			if err != nil {
				b.Fatal(err)
			}
			x, err := index.New(index.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			reserve(x, s)
			for i := range s.Events {
				_ = x.Apply(&s.Events[i])
			}
			s.Events = nil
			runtime.GC()
			benchQueries(b, x, s.Queries[:min(len(s.Queries), DefaultRunConfig().Queries)], 256)
		})
	}
}

// benchQueries times b.N queries (qs in turn, each cut to limit blocks)
// one at a time.
func benchQueries(b *testing.B, x *index.Index, qs [][]uint64, limit int) {
	var sc index.Scores
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var wall, cpu []time.Duration
	scores := 0
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		q := qs[i%len(qs)]
		if len(q) > limit {
			q = q[:limit]
		}
		c0, ok := threadClock()
		t := time.Now()
		x.Query(q, &sc)
		wall = append(wall, time.Since(t))
		if c1, ok1 := threadClock(); ok && ok1 {
			cpu = append(cpu, c1-c0)
		}
		scores += len(sc.List)
		i++
	}
	b.StopTimer()
	b.ReportMetric(float64(scores)/float64(i), "scores/query")
	for _, m := range []struct {
		xs   []time.Duration
		unit string
	}{{wall, "ns"}, {cpu, "cpu-ns"}} {
		if len(m.xs) == 0 {
			continue
		}
		slices.Sort(m.xs)
		b.ReportMetric(float64(m.xs[len(m.xs)/2].Nanoseconds()), "p50-"+m.unit)
		b.ReportMetric(float64(m.xs[len(m.xs)*99/100].Nanoseconds()), "p99-"+m.unit)
	}
}
