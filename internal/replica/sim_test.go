package replica

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/router"
)

// simResult is what one offline replay measured.
type simResult struct {
	hitRatio         float64
	ttftP50, ttftP99 time.Duration
	busiest          float64 // busiest worker's share of requests
}

type simMode int

const (
	simSynced          simMode = iota // lifecycle events shared (delivered at the next instant), shadows on
	simNoSync                         // every replica sees only its own bookings
	simSyncedNoShadows                // lifecycle events shared, shadows off
)

// simulate replays a prefix-family workload on 4 mock engines (virtual
// clock) through `replicas` routers, requests spread round-robin over the
// replicas. Every router applies every KV event.
func simulate(tb testing.TB, replicas int, mode simMode, n int, gap time.Duration) simResult {
	const (
		workers  = 4
		families = 12
		prefix   = 1536
		suffix   = 256
		output   = 48
	)
	clk := &clock{now: t0}
	h := &hub{t: tb}
	var cores []*Core
	var routers []*router.Router
	for i := range replicas {
		r := newTestRouter(tb, simIDBase+uint64(i), workers, clk.Now)
		var emit func(router.LifecycleEvent)
		if mode != simNoSync {
			emit = h.emit
		}
		c := NewCore(r, CoreConfig{Shadows: mode == simSynced, ShadowTTL: 10 * time.Millisecond}, emit)
		routers = append(routers, r)
		cores = append(cores, c)
	}
	h.cores = cores
	if mode != simNoSync {
		for _, c := range cores {
			for _, p := range cores {
				c.PeerUp(p.RouterID())
			}
		}
	}
	mc := mocker.DefaultConfig()
	mc.BlockSize = 16
	mc.NumGPUBlocks = 2048
	mc.MaxNumBatchedTokens = 4096
	engines := make([]*mocker.Engine, workers)
	busyUntil := make([]time.Time, workers) // end of the step in flight
	type pendingStep struct {
		outs []mocker.Output
		evs  []kvevent.Event
	}
	inflight := make([]*pendingStep, workers)
	for i := range engines {
		e, err := mocker.NewEngine(mc)
		if err != nil {
			tb.Fatal(err)
		}
		engines[i] = e
	}
	rng := rand.New(rand.NewPCG(7, 9))
	arrivals := make([]time.Time, n)
	at := t0
	for i := range arrivals {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(gap)))
		arrivals[i] = at
	}
	owner := map[uint64]int{}
	var ttfts []time.Duration
	share := make([]int, workers)
	startStep := func(w int, now time.Time) {
		res := engines[w].Step()
		if res.Duration == 0 && len(res.Outputs) == 0 && len(res.Events) == 0 {
			inflight[w] = nil
			return
		}
		ps := &pendingStep{outs: slices.Clone(res.Outputs)}
		for _, ev := range res.Events {
			ps.evs = append(ps.evs, ev.KVEvent(kvevent.Worker{ID: kvevent.WorkerID(w + 1)}))
		}
		inflight[w] = ps
		busyUntil[w] = now.Add(max(res.Duration, time.Microsecond))
	}
	next := 0
	for {
		// The next thing to happen: an arrival or the end of a step.
		w, when := -1, time.Time{}
		for i := range engines {
			if inflight[i] != nil && (w < 0 || busyUntil[i].Before(when)) {
				w, when = i, busyUntil[i]
			}
		}
		if next < n && (w < 0 || !arrivals[next].After(when)) {
			now := arrivals[next]
			clk.mu.Lock()
			clk.now = now
			clk.mu.Unlock()
			h.flush()
			ri := next % replicas
			id := uint64(next)
			fam := rng.IntN(families)
			toks := prompt(fam, next+1, prefix, prefix+suffix)
			d, err := cores[ri].Route(router.Request{ID: strconv.FormatUint(id, 10), Tokens: toks, ExpectedOutputTokens: output}, now)
			if err != nil {
				tb.Fatal(err)
			}
			wi := int(d.Worker.ID) - 1
			share[wi]++
			owner[id] = ri
			if err := engines[wi].Add(mocker.Request{ID: id, Tokens: toks, MaxTokens: output}); err != nil {
				tb.Fatal(err)
			}
			if inflight[wi] == nil {
				startStep(wi, now)
			}
			next++
			continue
		}
		if w < 0 {
			break
		}
		clk.mu.Lock()
		clk.now = when
		clk.mu.Unlock()
		h.flush()
		ps := inflight[w]
		for _, ev := range ps.evs {
			for _, r := range routers {
				if err := r.ApplyEvent(ev); err != nil {
					tb.Fatal(err)
				}
			}
		}
		for _, o := range ps.outs {
			r := routers[owner[o.ID]]
			id := strconv.FormatUint(o.ID, 10)
			if o.First {
				ttfts = append(ttfts, when.Sub(arrivals[o.ID]))
				r.MarkPrefillCompleted(id)
			}
			if o.Finished {
				r.Free(id)
			}
		}
		startStep(w, when)
	}
	h.flush()
	var q, hit uint64
	for _, e := range engines {
		s := e.Stats()
		q += s.PrefixQueries
		hit += s.PrefixHits
	}
	slices.Sort(ttfts)
	pct := func(p float64) time.Duration { return ttfts[int(math.Ceil(p*float64(len(ttfts))))-1] }
	return simResult{
		hitRatio: float64(hit) / float64(q),
		ttftP50:  pct(0.50), ttftP99: pct(0.99),
		busiest: float64(slices.Max(share)) / float64(n),
	}
}

// BenchmarkReplicaSync replays the same workload through 1 router, 3 synced
// replicas and 3 unsynced replicas (requests round-robin over replicas) on
// a simulated fleet, and reports hit ratio and TTFT percentiles. Figures
// are in docs/benchmarks.md "Replica sync".
func BenchmarkReplicaSync(b *testing.B) {
	cases := []struct {
		name     string
		replicas int
		mode     simMode
	}{{"1router", 1, simSynced}, {"3synced", 3, simSynced}, {"3synced-noshadows", 3, simSyncedNoShadows}, {"3nosync", 3, simNoSync}}
	for _, gap := range []time.Duration{40 * time.Millisecond, 30 * time.Millisecond} {
		for _, c := range cases {
			b.Run(fmt.Sprintf("gap%v/%s", gap, c.name), func(b *testing.B) {
				var res simResult
				for b.Loop() {
					res = simulate(b, c.replicas, c.mode, 1500, gap)
				}
				b.ReportMetric(res.hitRatio*100, "hit%")
				b.ReportMetric(float64(res.ttftP50.Microseconds())/1000, "ttft_p50_ms")
				b.ReportMetric(float64(res.ttftP99.Microseconds())/1000, "ttft_p99_ms")
				b.ReportMetric(res.busiest*100, "busiest%")
			})
		}
	}
}

// TestSimulatedReplicas checks the benchmark's claim on a shorter run: 3
// synced replicas stay within 5 % of one router on hit ratio and TTFT p50.
func TestSimulatedReplicas(t *testing.T) {
	const gap = 40 * time.Millisecond
	one := simulate(t, 1, simSynced, 400, gap)
	three := simulate(t, 3, simSynced, 400, gap)
	none := simulate(t, 3, simNoSync, 400, gap)
	for _, x := range []struct {
		name string
		r    simResult
	}{{"1 router", one}, {"3 synced", three}, {"3 no sync", none}} {
		t.Logf("%-10s hit %.4f ttft p50 %v p99 %v busiest %.3f", x.name, x.r.hitRatio, x.r.ttftP50, x.r.ttftP99, x.r.busiest)
	}
	if math.Abs(three.hitRatio-one.hitRatio) > 0.05*one.hitRatio {
		t.Errorf("hit ratio %.4f vs single %.4f", three.hitRatio, one.hitRatio)
	}
	if d := float64(three.ttftP50 - one.ttftP50); math.Abs(d) > 0.05*float64(one.ttftP50) {
		t.Errorf("ttft p50 %v vs single %v", three.ttftP50, one.ttftP50)
	}
}

var simIDBase uint64 = 1
