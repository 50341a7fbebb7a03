package index

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

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

// BenchmarkRecord8k records 512-block prompts on 64 approximate workers.
//
// refresh: the same 64 prompts over and over (each worker re-records its
// own), so every block is already indexed and only its TTL moves.
//
// new: a fresh 384-block tail each time (a family's 128-block system
// prompt is shared), with the clock moving 120 s / 512 per record, so
// about 512 records (~200 k entries) stay live and each record expires an
// old one: the steady state of a router in approximate mode.
//
// capped: new with a 65,536-entry size cap, so every few dozen records
// prune the earliest-expiring entries.
func BenchmarkRecord8k(b *testing.B) {
	b.Run("refresh", func(b *testing.B) {
		x := mustNew(b, DefaultConfig())
		prompts := recordPrompts(64)
		now := t0
		for w, p := range prompts {
			if err := x.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(w)}, p, now); err != nil {
				b.Fatal(err)
			}
		}
		benchRecord(b, func(i int) {
			now = now.Add(time.Millisecond)
			w := i % len(prompts)
			_ = x.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(w)}, prompts[w], now)
		})
		if got := x.Stats().Entries; got != 64*512 {
			b.Fatalf("%d entries, want %d", got, 64*512)
		}
	})
	b.Run("new", func(b *testing.B) { benchRecordNew(b, DefaultConfig()) })
	b.Run("capped", func(b *testing.B) {
		cfg := DefaultConfig()
		cfg.ApproxMaxBlocks = 1 << 16 // pruned every ~34 records
		benchRecordNew(b, cfg)
	})
}

func benchRecordNew(b *testing.B, cfg Config) {
	x := mustNew(b, cfg)
	prompts := recordPrompts(4096)
	fresh := func(i int) []uint64 {
		p := prompts[i%len(prompts)]
		// A new tail every lap: salt the unique blocks with the lap.
		if lap := uint64(i / len(prompts)); lap > 0 {
			for j := 128; j < len(p); j++ {
				p[j] ^= lap * 0x9e3779b97f4a7c15
			}
		}
		return p
	}
	now := t0
	step := 120 * time.Second / 512
	for i := range 1024 { // warm up into the steady state
		now = now.Add(step)
		_ = x.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(i % 64)}, fresh(i), now)
	}
	n := 1024
	benchRecord(b, func(int) {
		now = now.Add(step)
		_ = x.Record(kvevent.WorkerRank{ID: kvevent.WorkerID(n % 64)}, fresh(n), now)
		n++
	})
	b.ReportMetric(float64(x.Stats().Entries), "entries")
}

// BenchmarkPredict8k records predict-on-route entries for 512-block
// prompts on an index whose 64 exact workers hold 4 such prompts each,
// the clock moving 1 ms per call (5 s TTL: ~5,000 predictions live, most
// of them refreshing blocks an earlier prediction made).
func BenchmarkPredict8k(b *testing.B) {
	x := mustNew(b, DefaultConfig())
	prompts := recordPrompts(256)
	for i, p := range prompts {
		ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(i % 64)}, Kind: kvevent.Stored}
		for j, l := range p {
			ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: engineHash(p[:j+1], 0), LocalHash: l})
		}
		if err := x.Apply(&ev); err != nil {
			b.Fatal(err)
		}
	}
	now := t0
	predict := func(i int) {
		now = now.Add(time.Millisecond)
		_ = x.Predict(kvevent.WorkerRank{ID: kvevent.WorkerID((i * 7) % 64)}, prompts[i%len(prompts)], now)
	}
	for i := range 10_000 { // two TTLs: into the steady state
		predict(i)
	}
	benchRecord(b, func(i int) { predict(10_000 + i) })
}

func benchRecord(b *testing.B, op func(i int)) {
	b.ReportAllocs()
	i := 0
	var ct *cpuTimer
	for b.Loop() {
		if ct == nil {
			ct = startCPU(b)
		}
		op(i)
		i++
	}
	ct.stop()
}
