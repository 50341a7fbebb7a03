package indexbench

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/trace"
)

var (
	streamOnce sync.Once
	stream     *Stream
	streamErr  error
)

// replayStream is the first 3000 conversation-trace requests over 64
// workers of 16384 blocks.
func replayStream(b *testing.B) *Stream {
	streamOnce.Do(func() {
		reqs, err := trace.Load("conversation")
		if err != nil {
			streamErr = err
			return
		}
		cfg := DefaultConfig()
		cfg.MaxRequests = 3000
		stream, streamErr = Build(reqs, cfg)
	})
	if streamErr != nil {
		b.Fatal(streamErr)
	}
	return stream
}

// BenchmarkReplayApply applies the whole replay stream to a fresh index on
// one writer; block-ops/s is the figure to compare with the target.
func BenchmarkReplayApply(b *testing.B) {
	s := replayStream(b)
	b.ReportAllocs()
	for b.Loop() {
		x, err := index.New(index.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		for i := range s.Events {
			_ = x.Apply(&s.Events[i])
		}
	}
	b.ReportMetric(float64(s.BlockOps*b.N)/b.Elapsed().Seconds(), "block-ops/s")
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
