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
	// ties counts decisions taken among several lowest-cost workers (the
	// tie-break draw decided them).
	ties int
	// diverged counts decisions where the deciding replica's candidate
	// rows (load, overlap, cost) differed from those of a reference
	// single router that saw every KV event and booked every decision
	// (with simRun.reference).
	diverged int
}

// simRun says what to replay.
type simRun struct {
	replicas int
	mode     simMode
	n        int           // requests
	gap      time.Duration // mean inter-arrival time
	// seed seeds the routers' tie-breaks (replica i gets seed+i); the
	// workload is the same for every seed.
	seed uint64
	// reference checks each decision against a single router fed the
	// same events and decisions (see simResult.diverged).
	reference bool
	// trace, when set, sees every decision.
	trace func(i int, d router.Decision)
}

type simMode int

const (
	simSynced          simMode = iota // lifecycle events shared (delivered at the next instant), shadows on
	simNoSync                         // every replica sees only its own bookings
	simSyncedNoShadows                // lifecycle events shared, shadows off
)

// simulate replays a prefix-family workload on 4 mock engines (virtual
// clock) through run.replicas routers, requests spread round-robin over
// the replicas. Every router applies every KV event.
func simulate(tb testing.TB, run simRun) simResult {
	replicas, mode, n, gap := run.replicas, run.mode, run.n, run.gap
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
		r := newTestRouter(tb, run.seed+uint64(i), workers, clk.Now)
		var emit func(Event)
		if mode != simNoSync {
			emit = h.emit
		}
		c := NewCore(r, CoreConfig{Shadows: mode == simSynced, ShadowTTL: 10 * time.Millisecond}, emit)
		routers = append(routers, r)
		cores = append(cores, c)
	}
	h.cores = cores
	var ref *router.Router
	if run.reference {
		ref = newTestRouter(tb, 1<<40, workers, clk.Now)
		routers = append(routers, ref) // fed every KV event below
	}
	var res simResult
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
	var err error
	share := make([]int, workers)
	startStep := func(w int, now time.Time) {
		res := engines[w].Step()
		if res.Duration == 0 && len(res.Outputs) == 0 && len(res.Events) == 0 {
			inflight[w] = nil
			return
		}
		ps := &pendingStep{outs: slices.Clone(res.Outputs)}
		for _, ev := range res.Events {
			ps.evs = append(ps.evs, ev.KVEvent(kvevent.WorkerRank{ID: kvevent.WorkerID(w + 1)}))
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
			req := router.Request{ID: strconv.FormatUint(id, 10), Tokens: toks, ExpectedOutputTokens: output}
			var want router.Decision
			if ref != nil {
				if want, err = ref.Plan(req); err != nil {
					tb.Fatal(err)
				}
			}
			d, err := routers[ri].Route(req)
			if err != nil {
				tb.Fatal(err)
			}
			if ties(d) > 1 {
				res.ties++
			}
			if ref != nil {
				if !sameRows(want, d) {
					res.diverged++
				}
				pinned := req
				pinned.PinnedWorker, pinned.HasPinned = d.Worker.ID, true
				if _, err := ref.Route(pinned); err != nil {
					tb.Fatal(err)
				}
			}
			if run.trace != nil {
				run.trace(next, d)
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
				if ref != nil {
					ref.MarkPrefillCompleted(id)
				}
			}
			if o.Finished {
				r.Free(id)
				if ref != nil {
					ref.Free(id)
				}
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
	res.hitRatio = float64(hit) / float64(q)
	res.ttftP50, res.ttftP99 = pct(0.50), pct(0.99)
	res.busiest = float64(slices.Max(share)) / float64(n)
	return res
}

// ties returns how many eligible candidates share the lowest cost.
func ties(d router.Decision) int {
	lo, n := math.Inf(1), 0
	for _, c := range d.Candidates {
		switch {
		case c.Excluded != "":
		case c.Cost < lo:
			lo, n = c.Cost, 1
		case c.Cost == lo:
			n++
		}
	}
	return n
}

// sameRows reports whether two decisions saw the same candidates: load,
// overlap and cost of every worker.
func sameRows(a, b router.Decision) bool {
	if len(a.Candidates) != len(b.Candidates) {
		return false
	}
	for i, x := range a.Candidates {
		y := b.Candidates[i]
		if x.Worker != y.Worker || x.Overlap != y.Overlap || x.ActivePrefillTokens != y.ActivePrefillTokens ||
			x.ActiveBlocks != y.ActiveBlocks || x.ActiveRequests != y.ActiveRequests || x.DecodeBlocks != y.DecodeBlocks || x.Cost != y.Cost {
			return false
		}
	}
	return true
}

// BenchmarkReplicaSync replays the same workload through 1 router, 3 synced
// replicas and 3 unsynced replicas (requests round-robin over replicas) on
// a simulated fleet, for 5 tie-break seeds, and reports hit ratio, TTFT
// percentiles, the decisions taken by a tie-break draw and those where the
// deciding replica's view differed from a single router's. Figures are in
// docs/benchmarks.md "Replica sync".
func BenchmarkReplicaSync(b *testing.B) {
	cases := []struct {
		name     string
		replicas int
		mode     simMode
	}{{"1router", 1, simSynced}, {"3synced", 3, simSynced}, {"3synced-noshadows", 3, simSyncedNoShadows}, {"3nosync", 3, simNoSync}}
	for _, gap := range []time.Duration{40 * time.Millisecond, 30 * time.Millisecond} {
		for seed := uint64(1); seed <= 5; seed++ {
			for _, c := range cases {
				b.Run(fmt.Sprintf("gap%v/seed%d/%s", gap, seed, c.name), func(b *testing.B) {
					var res simResult
					for b.Loop() {
						res = simulate(b, simRun{replicas: c.replicas, mode: c.mode, n: 1500, gap: gap, seed: seed, reference: true})
					}
					b.ReportMetric(res.hitRatio*100, "hit%")
					b.ReportMetric(float64(res.ttftP50.Microseconds())/1000, "ttft_p50_ms")
					b.ReportMetric(float64(res.ttftP99.Microseconds())/1000, "ttft_p99_ms")
					b.ReportMetric(res.busiest*100, "busiest%")
					b.ReportMetric(float64(res.ties), "ties")
					b.ReportMetric(float64(res.diverged), "diverged")
				})
			}
		}
	}
}

// TestSimulatedReplicas checks the benchmark's claims on a shorter run: 3
// synced replicas stay within 5 % of one router on hit ratio and TTFT p50,
// and — the stronger claim — every decision a synced replica takes sees
// exactly the candidates (load, overlap, cost) a single router fed the
// same decisions would see, so the only difference from one router is
// which worker a tie-break draw picks. Without sync the views differ.
func TestSimulatedReplicas(t *testing.T) {
	const gap = 40 * time.Millisecond
	run := func(replicas int, mode simMode) simResult {
		return simulate(t, simRun{replicas: replicas, mode: mode, n: 400, gap: gap, seed: 1, reference: true})
	}
	one, three, plain, none := run(1, simSynced), run(3, simSynced), run(3, simSyncedNoShadows), run(3, simNoSync)
	for _, x := range []struct {
		name string
		r    simResult
	}{{"1 router", one}, {"3 synced", three}, {"3 no shadows", plain}, {"3 no sync", none}} {
		t.Logf("%-12s hit %.4f ttft p50 %v p99 %v busiest %.3f ties %d diverged %d", x.name, x.r.hitRatio, x.r.ttftP50, x.r.ttftP99, x.r.busiest, x.r.ties, x.r.diverged)
	}
	if math.Abs(three.hitRatio-one.hitRatio) > 0.05*one.hitRatio {
		t.Errorf("hit ratio %.4f vs single %.4f", three.hitRatio, one.hitRatio)
	}
	if d := float64(three.ttftP50 - one.ttftP50); math.Abs(d) > 0.05*float64(one.ttftP50) {
		t.Errorf("ttft p50 %v vs single %v", three.ttftP50, one.ttftP50)
	}
	if one.diverged != 0 || three.diverged != 0 || plain.diverged != 0 {
		t.Errorf("synced replicas' views differ from a single router's in %d / %d / %d decisions, want 0", one.diverged, three.diverged, plain.diverged)
	}
	if none.diverged == 0 {
		t.Error("unsynced replicas' views never differ from a single router's: the check cannot fail")
	}
	if three.ties == 0 {
		t.Error("no tie-break in the replay: the claim about ties is untested")
	}
}
