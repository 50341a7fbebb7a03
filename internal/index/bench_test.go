package index

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// queryFixture: 100 workers, each holding 40 of 400 distinct 256-block
// chains that share a 32-block system prompt: 1,024,000 (worker, block)
// entries.
func queryFixture(tb testing.TB) (*Index, [][]uint64) {
	x := mustNew(tb, DefaultConfig())
	chains, evs := queryEvents()
	for i := range evs {
		if err := x.Apply(&evs[i]); err != nil {
			tb.Fatal(err)
		}
	}
	return x, chains
}

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

// cpuTimer reports the benchmark goroutine's thread CPU time per op as
// "cpu-ns/op" next to the wall-clock ns/op.
type cpuTimer struct {
	b     *testing.B
	start time.Duration
	ok    bool
}

func startCPU(b *testing.B) *cpuTimer {
	runtime.LockOSThread()
	t := &cpuTimer{b: b}
	t.start, t.ok = threadCPU()
	return t
}

func (t *cpuTimer) stop() {
	end, ok := threadCPU()
	runtime.UnlockOSThread()
	if ok && t.ok && t.b.N > 0 {
		t.b.ReportMetric(float64((end-t.start).Nanoseconds())/float64(t.b.N), "cpu-ns/op")
	}
}

func BenchmarkQuery256Blocks100Workers(b *testing.B) {
	x, chains := queryFixture(b)
	b.ReportMetric(float64(x.Stats().Entries), "entries")
	var s Scores
	b.ReportAllocs()
	i := 0
	var ct *cpuTimer
	for b.Loop() {
		if ct == nil {
			ct = startCPU(b)
		}
		x.Query(chains[i%len(chains)], &s)
		i++
	}
	ct.stop()
}

// BenchmarkApply stores a 64-block chain and removes it again (128
// block-ops per iteration) on one of 100 workers, on a single writer.
func BenchmarkApply(b *testing.B) {
	x := mustNew(b, DefaultConfig())
	const n = 64
	evs := make([][2]kvevent.Event, 100)
	for w := range evs {
		st := kvevent.Event{Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(w)}, Kind: kvevent.Stored}
		rm := kvevent.Event{Worker: st.Worker, Kind: kvevent.Removed}
		for i := range n {
			st.Blocks = append(st.Blocks, kvevent.Block{EngineHash: uint64(w)<<32 | uint64(i), LocalHash: uint64(i%8 + 1)})
			rm.Removed = append(rm.Removed, uint64(w)<<32|uint64(n-1-i))
		}
		evs[w] = [2]kvevent.Event{st, rm}
	}
	b.ReportAllocs()
	i := 0
	var ct *cpuTimer
	for b.Loop() {
		if ct == nil {
			ct = startCPU(b)
		}
		e := &evs[i%len(evs)]
		_ = x.Apply(&e[0])
		_ = x.Apply(&e[1])
		i++
	}
	ct.stop()
	b.ReportMetric(float64(2*n*b.N)/b.Elapsed().Seconds(), "block-ops/s")
}

// BenchmarkRemoveChainRoot: one worker holds 64 chains of 256 blocks
// (16,384 entries); each iteration removes a chain's first block, which
// drops the 255 blocks below it with their engine entries (a cascade),
// then stores the chain again (512 block-ops per iteration).
func BenchmarkRemoveChainRoot(b *testing.B) {
	x := mustNew(b, DefaultConfig())
	const chains, n = 64, 256
	w := kvevent.WorkerRank{ID: 1}
	st := make([]kvevent.Event, chains)
	rm := make([]kvevent.Event, chains)
	for c := range chains {
		st[c] = kvevent.Event{Worker: w, Kind: kvevent.Stored}
		for i := range n {
			st[c].Blocks = append(st[c].Blocks, kvevent.Block{EngineHash: uint64(c)<<32 | uint64(i) + 1, LocalHash: uint64(c)<<32 | uint64(i)})
		}
		rm[c] = kvevent.Event{Worker: w, Kind: kvevent.Removed, Removed: []uint64{st[c].Blocks[0].EngineHash}}
		if err := x.Apply(&st[c]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	var ct *cpuTimer
	for b.Loop() {
		if ct == nil {
			ct = startCPU(b)
		}
		c := i % chains
		if err := x.Apply(&rm[c]); err != nil {
			b.Fatal(err)
		}
		if err := x.Apply(&st[c]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	ct.stop()
	if got := x.Stats().Entries; got != chains*n {
		b.Fatalf("%d entries, want %d", got, chains*n)
	}
}

// BenchmarkQueryLatency256Blocks100Workers times single queries on the
// same fixture as BenchmarkQuery256Blocks100Workers and reports their
// p50/p99, wall clock and thread CPU (Linux; each CPU reading adds a
// system call of about 0.3 µs to the figure).
func BenchmarkQueryLatency256Blocks100Workers(b *testing.B) {
	x, chains := queryFixture(b)
	var s Scores
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var wall, cpu []time.Duration
	i := 0
	for b.Loop() {
		c0, ok := threadClock()
		t := time.Now()
		x.Query(chains[i%len(chains)], &s)
		wall = append(wall, time.Since(t))
		if c1, ok1 := threadClock(); ok && ok1 {
			cpu = append(cpu, c1-c0)
		}
		i++
	}
	b.StopTimer()
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

// BenchmarkQuerySharedPrefix: every worker holds 16 chains of 256 blocks
// whose first 8 blocks (a system prompt) all workers share; a query is one
// worker's chain, so it scores every worker (8 blocks, and 256 for one):
// the cost that grows with the fleet.
//
// With layered, each worker's first chain continues below the system
// prompt with 8-block runs shared by halving groups of workers (half the
// fleet, a quarter, ... one), so the holder set shrinks step by step.
func BenchmarkQuerySharedPrefix(b *testing.B) {
	for _, layered := range []bool{false, true} {
		for _, workers := range []int{64, 256, 1024} {
			b.Run(fmt.Sprintf("layered=%v/workers=%d", layered, workers), func(b *testing.B) { benchSharedPrefix(b, workers, layered) })
		}
	}
}

func benchSharedPrefix(b *testing.B, workers int, layered bool) {
	levels := bits.Len(uint(workers - 1))
	{
		{
			x := mustNew(b, DefaultConfig())
			const chains, n, shared = 16, 256, 8
			var queries [][]uint64
			for w := range workers {
				for c := range chains {
					ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(w + 1)}, Kind: kvevent.Stored}
					q := make([]uint64, n)
					for i := range n {
						q[i] = uint64(i + 1)
						if i >= shared {
							q[i] = uint64(w+1)<<40 | uint64(c)<<20 | uint64(i)
						}
						if k := (i-shared)/8 + 1; layered && c == 0 && i >= shared && k <= levels {
							q[i] = 1<<63 | uint64(k)<<48 | uint64(w>>(levels-k))<<20 | uint64(i)
						}
						if c == 0 || i >= shared { // chains after the first hang below the shared blocks
							ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: uint64(c)<<32 | uint64(i) + 1, LocalHash: q[i]})
						}
					}
					if c > 0 {
						ev.HasParent, ev.Parent = true, shared
					}
					if err := x.Apply(&ev); err != nil {
						b.Fatal(err)
					}
					if c == 0 {
						queries = append(queries, q)
					}
				}
			}
			var s Scores
			b.ReportAllocs()
			i := 0
			var ct *cpuTimer
			for b.Loop() {
				if ct == nil {
					ct = startCPU(b)
				}
				x.Query(queries[i%len(queries)], &s)
				i++
			}
			ct.stop()
			if len(s.List) != workers {
				b.Fatalf("%d scores, want %d", len(s.List), workers)
			}
		}
	}
}
