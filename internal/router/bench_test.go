package router

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/liveindex"
)

// BenchmarkRoute measures Route end to end — hashing a 16 k-token prompt,
// querying a warm concurrent index, the ledger's potential load, the cost
// of every worker and the booking — and reports the p99 of single Route
// calls, for fleets of 64, 256 and 1,024 workers. Each worker holds 4 cached 16 k prompts from 8 system-prompt
// families (4 k shared tokens) and has 4 running requests; each timed
// request shares its family's system prompt with a quarter of the workers.
// The request is freed after timing so the load stays steady. Besides
// wall-clock percentiles it reports thread-CPU percentiles (Linux), which
// stay meaningful when other processes compete for the machine's cores,
// and the thread-CPU percentiles of hashing the same prompt alone (done
// outside the timed Route call, in the same loop).
func BenchmarkRoute(b *testing.B) {
	for _, workers := range []int{64, 256, 1024} {
		for _, bs := range []int{16, 64} {
			b.Run(fmt.Sprintf("workers=%d/block=%d", workers, bs), func(b *testing.B) { benchRoute(b, workers, bs) })
		}
	}
}

func benchRoute(b *testing.B, workers, bs int) {
	const (
		families = 8
		shared   = 4096
		prompt   = 16384
	)
	cc := liveindex.DefaultConfig()
	cc.Writers = 2
	x, err := liveindex.New(cc)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	cfg := DefaultConfig()
	cfg.BlockSize = bs
	r := newRouter(b, cfg, x, workers)
	id := 0
	for w := 1; w <= workers; w++ {
		fam := w % families
		for k := range 4 {
			toks := tokens(fam, id, shared, prompt)
			id++
			ev, _ := storeEvent(kvevent.WorkerRank{ID: kvevent.WorkerID(w)}, toks, bs, 0)
			if err := r.ApplyEvent(ev); err != nil {
				b.Fatal(err)
			}
			if _, err := r.Route(Request{ID: fmt.Sprintf("warm-%d-%d", w, k), Tokens: toks, PinnedWorker: kvevent.WorkerID(w), HasPinned: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := x.Flush(); err != nil {
		b.Fatal(err)
	}
	reqs := make([][]uint32, 64)
	for i := range reqs {
		reqs[i] = tokens(i%families, 1_000_000+i, shared, prompt)
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("bench-", i)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, haveCPU := threadCPU()
	var lat, cpu, hashCPU []time.Duration
	var local, seq []uint64
	var expl []Explanation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		// Hashing alone, timed in the same conditions, so the figures can be
		// read as "hashing + the rest of Route" on a noisy machine.
		h0, _ := threadCPU()
		local, seq, _ = kvhash.Hashes(reqs[i%len(reqs)], kvhash.Options{BlockSize: bs}, local, seq)
		h1, _ := threadCPU()
		hashCPU = append(hashCPU, h1-h0)
		c0, _ := threadCPU()
		start := time.Now()
		d, err := r.Route(Request{ID: ids[i%len(ids)], Tokens: reqs[i%len(reqs)], Explanation: expl})
		lat = append(lat, time.Since(start))
		c1, _ := threadCPU()
		cpu = append(cpu, c1-c0)
		if err != nil {
			b.Fatal(err)
		}
		r.Free(d.RequestID)
		expl = d.Candidates
	}
	b.StopTimer()
	report := func(xs []time.Duration, unit string) {
		slices.Sort(xs)
		b.ReportMetric(float64(xs[len(xs)/2].Nanoseconds()), "p50-"+unit)
		b.ReportMetric(float64(xs[len(xs)*99/100].Nanoseconds()), "p99-"+unit)
	}
	report(lat, "ns")
	if haveCPU {
		// The same percentiles in thread CPU time (wall time minus time
		// spent waiting for a core; includes ~0.3 µs of clock reads).
		report(cpu, "cpu-ns")
		report(hashCPU, "hash-cpu-ns")
	}
}
