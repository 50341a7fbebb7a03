package indexbench

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/trace"
)

type cachedStream struct {
	once sync.Once
	s    *Stream
	err  error
}

var (
	short, full cachedStream
)

// replayStream is the first 3000 conversation-trace requests over 64
// workers of 16384 blocks.
func replayStream(b *testing.B) *Stream { return short.get(b, 3000) }

// fullStream is the whole conversation trace, the `kvrouter bench index`
// default workload (caches fill up, so removals are frequent).
func fullStream(b *testing.B) *Stream { return full.get(b, 0) }

func (c *cachedStream) get(b *testing.B, requests int) *Stream {
	c.once.Do(func() {
		reqs, err := trace.Load("conversation")
		if err != nil {
			c.err = err
			return
		}
		cfg := DefaultConfig()
		cfg.MaxRequests = requests
		c.s, c.err = Build(reqs, cfg)
	})
	if c.err != nil {
		b.Fatal(c.err)
	}
	return c.s
}

// BenchmarkReplayApply applies the whole replay stream to a fresh index on
// one writer; block-ops/s is the figure to compare with the target.
func BenchmarkReplayApply(b *testing.B) { benchApply(b, replayStream(b)) }

// BenchmarkReplayApplyFull applies the whole conversation-trace stream
// (the `kvrouter bench index` workload) to a fresh index on one writer.
func BenchmarkReplayApplyFull(b *testing.B) { benchApply(b, fullStream(b)) }

// BenchmarkReplayApplyFullNoReserve is BenchmarkReplayApplyFull without
// index.Reserve: the engine tables grow by doubling as blocks arrive.
func BenchmarkReplayApplyFullNoReserve(b *testing.B) {
	benchApplyFrom(b, fullStream(b), 0, false)
}

// BenchmarkReplayApplyFullSecondHalf times only the second half of the
// whole trace's events, applied after the first half (untimed) on a fresh
// reserved index: the steady-state rate, tables grown and caches full.
func BenchmarkReplayApplyFullSecondHalf(b *testing.B) {
	s := fullStream(b)
	benchApplyFrom(b, s, len(s.Events)/2, true)
}

func benchApply(b *testing.B, s *Stream) { benchApplyFrom(b, s, 0, true) }

// benchApplyFrom applies s to a fresh index per iteration, reserved when
// asked, and times the events from from on.
func benchApplyFrom(b *testing.B, s *Stream, from int, reserved bool) {
	ops := 0
	for _, ev := range s.Events[from:] {
		ops += len(ev.Blocks) + len(ev.Removed)
	}
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	cpuOK := true
	for b.Loop() {
		b.StopTimer()
		x, err := index.New(index.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		if from > 0 {
			reserve(x, s)
			for i := range s.Events[:from] {
				_ = x.Apply(&s.Events[i])
			}
		}
		b.StartTimer()
		c0, ok0 := threadCPU()
		if reserved && from == 0 {
			reserve(x, s)
		}
		for i := from; i < len(s.Events); i++ {
			_ = x.Apply(&s.Events[i])
		}
		c1, ok1 := threadCPU()
		cpu += c1 - c0
		cpuOK = cpuOK && ok0 && ok1
	}
	b.ReportMetric(float64(ops*b.N)/b.Elapsed().Seconds(), "block-ops/s")
	if cpuOK && cpu > 0 {
		b.ReportMetric(float64(ops*b.N)/cpu.Seconds(), "block-ops/cpu-s")
	}
}

// BenchmarkReadersWhileWriting applies the second half of the whole
// trace's stream through a live index (liveindex, 4 writers) while one reader
// queries flat out: queries/s and the reader's wall-clock p50/p99, lock
// waits included.
func BenchmarkReadersWhileWriting(b *testing.B) {
	s := fullStream(b)
	var r concurrentResult
	for b.Loop() {
		var err error
		if r, err = concurrentRun(context.Background(), s, 4, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(r.queriesPerSec, "queries/s")
	b.ReportMetric(r.blockOpsPerSec, "block-ops/s")
	b.ReportMetric(r.p50us, "p50-µs")
	b.ReportMetric(r.p99us, "p99-µs")
}

// BenchmarkReplayQuery queries the replayed index with the stream's
// requests in turn.
func BenchmarkReplayQuery(b *testing.B) {
	s := replayStream(b)
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	for i := range s.Events {
		_ = x.Apply(&s.Events[i])
	}
	var sc index.Scores
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		x.Query(s.Queries[i%len(s.Queries)], &sc)
		i++
	}
}
