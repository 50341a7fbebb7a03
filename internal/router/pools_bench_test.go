package router

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
)

// BenchmarkPoolsRoute measures Pools.Route over 64 workers split into 1
// or 4 models (16 workers each), with BenchmarkRoute's load: each worker
// holds 4 cached 16 k prompts from 8 system-prompt families and each
// timed request shares its family's system prompt. Requests rotate over
// the models; each model's prompts are its own (distinct families), as
// different models' tokenizations would be.
func BenchmarkPoolsRoute(b *testing.B) {
	for _, models := range []int{1, 4} {
		b.Run(fmt.Sprintf("models=%d/workers=%d", models, 64/models), func(b *testing.B) { benchPools(b, models, 64/models) })
	}
}

func benchPools(b *testing.B, models, perModel int) {
	const (
		families = 8
		shared   = 4096
		prompt   = 16384
		bs       = 16
	)
	cc := liveindex.DefaultConfig()
	cc.Writers = 2
	x, err := liveindex.New(cc)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	names := make([]string, models)
	for m := range names {
		names[m] = fmt.Sprint("model-", m)
	}
	p, err := NewPools(names[0], DefaultConfig(), x, fixedClock, nil)
	if err != nil {
		b.Fatal(err)
	}
	id := 0
	for m, name := range names {
		for k := 1; k <= perModel; k++ {
			w := kvevent.WorkerID(m*perModel + k)
			if err := p.AddWorker(name, WorkerInfo{ID: w, BlockSize: bs}); err != nil {
				b.Fatal(err)
			}
			fam := m*families + k%families
			for j := range 4 {
				toks := tokens(fam, id, shared, prompt)
				id++
				ev, _ := storeEvent(kvevent.WorkerRank{ID: w}, toks, bs, 0)
				if err := p.ApplyEvent(ev); err != nil {
					b.Fatal(err)
				}
				if _, err := p.Route(Request{ID: fmt.Sprintf("warm-%d-%d", w, j), Model: name, Tokens: toks, PinnedWorker: w, HasPinned: true}); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := x.Flush(); err != nil {
		b.Fatal(err)
	}
	type req struct {
		model string
		toks  []uint32
	}
	reqs := make([]req, 64)
	for i := range reqs {
		m := i % models
		reqs[i] = req{names[m], tokens(m*families+(i/models)%families, 1_000_000+i, shared, prompt)}
	}
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprint("bench-", i)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, haveCPU := threadCPU()
	var lat, cpu []time.Duration
	var expl []Explanation
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		q := reqs[i%len(reqs)]
		c0, _ := threadCPU()
		start := time.Now()
		d, err := p.Route(Request{ID: ids[i%len(ids)], Model: q.model, Tokens: q.toks, Explanation: expl})
		lat = append(lat, time.Since(start))
		c1, _ := threadCPU()
		cpu = append(cpu, c1-c0)
		if err != nil {
			b.Fatal(err)
		}
		p.Free(d.RequestID)
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
		report(cpu, "cpu-ns")
	}
}
