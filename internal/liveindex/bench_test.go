package liveindex

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// queryEvents: 100 workers, each holding 40 of 400 distinct 256-block
// chains that share a 32-block system prompt: 1,024,000 (worker, block)
// entries (the fixture of package index's query benchmarks).
func queryEvents() ([][]uint64, []kvevent.Event) {
	var evs []kvevent.Event
	rng := rand.New(rand.NewPCG(1, 2))
	chains := make([][]uint64, 400)
	for c := range chains {
		chains[c] = make([]uint64, 256)
		for i := range chains[c] {
			if i < 32 {
				chains[c][i] = uint64(i + 1)
			} else {
				chains[c][i] = rng.Uint64()
			}
		}
	}
	for w := range kvevent.WorkerID(100) {
		for _, c := range rng.Perm(len(chains))[:40] {
			ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: w}, Kind: kvevent.Stored}
			for i, l := range chains[c] {
				ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: engineHash(chains[c][:i+1], 0), LocalHash: l})
			}
			evs = append(evs, ev)
		}
	}
	return chains, evs
}

// BenchmarkQuery256Blocks100Workers is package index's query benchmark
// through the live index: the read lock's cost on top of the tree's.
func BenchmarkQuery256Blocks100Workers(b *testing.B) {
	c, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	chains, evs := queryEvents()
	for _, ev := range evs {
		_ = c.Apply(ev)
	}
	_ = c.Flush()
	var s index.Scores
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		c.Query(chains[i%len(chains)], &s)
		i++
	}
}

// recordPrompts returns n 512-block prompts (an 8 k-token prompt at block
// size 16): each shares the first 128 blocks with the others of its
// family (8 families), the rest is its own.
func recordPrompts(n int) [][]uint64 {
	rng := rand.New(rand.NewPCG(3, 4))
	out := make([][]uint64, n)
	for p := range out {
		out[p] = make([]uint64, 512)
		for i := range out[p] {
			if i < 128 {
				out[p][i] = uint64(p%8)<<32 | uint64(i+1)
			} else {
				out[p][i] = rng.Uint64()
			}
		}
	}
	return out
}

// BenchmarkRouteApprox8k is the index's share of Route for workers in
// approximate mode, on the live index (2 writers) as the router uses
// it: query a 512-block prompt, then Record it on a worker (a fresh
// 384-block tail each time, the clock moving 120 s / 512 per call), flat
// out. The writers apply the recordings under the write lock while the
// next queries wait for the read lock, so the query percentiles show what
// a long recording costs the routing path. Reports p50/p99 of the query
// (wall and thread CPU) next to ns/op for query + record.
func BenchmarkRouteApprox8k(b *testing.B) {
	cc := DefaultConfig()
	cc.Writers = 2
	c, err := New(cc)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prompts := recordPrompts(4096)
	now := t0
	step := 120 * time.Second / 512
	var s index.Scores
	for i := range 1024 { // warm up into the steady state
		now = now.Add(step)
		c.Query(prompts[i], &s)
		_ = c.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(i % 64)}, slices.Clone(prompts[i]), now)
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var wall, cpu []time.Duration
	n := 1024
	b.ReportAllocs()
	for b.Loop() {
		p := prompts[n%len(prompts)]
		if lap := uint64(n / len(prompts)); lap > 0 {
			for j := 128; j < len(p); j++ { // a new tail every lap
				p[j] ^= lap * 0x9e3779b97f4a7c15
			}
		}
		now = now.Add(step)
		c0, ok := threadClock()
		t := time.Now()
		c.Query(p, &s)
		wall = append(wall, time.Since(t))
		if c1, ok1 := threadClock(); ok && ok1 {
			cpu = append(cpu, c1-c0)
		}
		_ = c.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(n % 64)}, slices.Clone(p), now)
		n++
	}
	b.StopTimer()
	_ = c.Flush()
	reportPercentiles(b, wall, "query-ns")
	reportPercentiles(b, cpu, "query-cpu-ns")
}

func reportPercentiles(b *testing.B, xs []time.Duration, unit string) {
	if len(xs) == 0 {
		return
	}
	slices.Sort(xs)
	b.ReportMetric(float64(xs[len(xs)/2].Nanoseconds()), "p50-"+unit)
	b.ReportMetric(float64(xs[len(xs)*99/100].Nanoseconds()), "p99-"+unit)
}
