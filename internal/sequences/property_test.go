package sequences

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"pgregory.net/rapid"
)

// naiveReq is the model's record of a live request.
type naiveReq struct {
	w           kvevent.WorkerRank
	tracked     []uint64
	private     int
	prefill     int
	prefillDone bool
	output      int
	frac        float64
	booked      naiveEvent
	expected    int
}

// naive recomputes every figure from the list of live requests.
type naive struct {
	cfg  Config
	reqs map[string]*naiveReq
	// done is each worker's last completion of a request with prefill
	// (its mark, or its free before one).
	done map[kvevent.WorkerRank]naiveEvent
}

// naiveEvent is a booking or a completion: its action's step (they are
// ordered by it) and its time (zero: untimed).
type naiveEvent struct {
	step int
	at   time.Time
}

// prefillSince is, while the worker has prefill pending, the time of the
// later of its last completion and the booking of its oldest request
// still to prefill (the engine has been on the queue since then); an
// untimed completion leaves it unknown.
func (m *naive) prefillSince(w kvevent.WorkerRank) time.Time {
	oldest := naiveEvent{step: -1}
	for _, r := range m.reqs {
		if r.w == w && !r.prefillDone && r.prefill > 0 && (oldest.step < 0 || r.booked.step < oldest.step) {
			oldest = r.booked
		}
	}
	if oldest.step < 0 {
		return time.Time{}
	}
	if d, ok := m.done[w]; ok && d.step > oldest.step {
		return d.at
	}
	return oldest.at
}

// complete records r's prefill leaving at ev.
func (m *naive) complete(r *naiveReq, ev naiveEvent) {
	if !r.prefillDone && r.prefill > 0 {
		m.done[r.w] = ev
	}
	r.prefillDone = true
}

func (m *naive) refs(w kvevent.WorkerRank) map[uint64]int {
	refs := map[uint64]int{}
	for _, r := range m.reqs {
		if r.w == w {
			for _, h := range r.tracked {
				refs[h]++
			}
		}
	}
	return refs
}

func (m *naive) load(w kvevent.WorkerRank) Load {
	l := Load{Worker: w}
	refs := m.refs(w)
	s := m.cfg.ActiveSequenceStride
	l.ActiveBlocks = float64(s * len(refs))
	for _, r := range m.reqs {
		if r.w != w {
			continue
		}
		l.ActiveRequests++
		if !r.prefillDone {
			l.ActivePrefillTokens += r.prefill
		}
		if r.expected >= 2 {
			l.ITLExposure += 1 / float64(r.expected-1)
		}
		l.ActiveBlocks += float64(r.private + r.output)
		if r.frac < 1 {
			single := r.private + r.output
			for _, h := range r.tracked {
				if refs[h] == 1 {
					single += s
				}
			}
			l.ActiveBlocks += (r.frac - 1) * float64(single)
		}
	}
	return l
}

func (m *naive) newBlocks(w kvevent.WorkerRank, hashes []uint64, reuse bool) int {
	s := m.cfg.ActiveSequenceStride
	n := len(hashes) / s
	if !m.cfg.TrackActiveBlocks {
		return 0
	}
	if !reuse {
		return n * s
	}
	refs := m.refs(w)
	k := 0
	for k < n && refs[hashes[(k+1)*s-1]] > 0 {
		k++
	}
	return (n - k) * s
}

func TestLedgerMatchesNaiveModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.BlockSize = 4
		cfg.ActiveSequenceStride = rapid.IntRange(1, 3).Draw(rt, "stride")
		cfg.AssumeKVReuse = rapid.Bool().Draw(rt, "reuse")
		cfg.TrackOutputBlocks = rapid.Bool().Draw(rt, "trackOutput")
		cfg.Expiry = 0
		tr, err := New(cfg)
		if err != nil {
			rt.Fatal(err)
		}
		m := &naive{cfg: cfg, reqs: map[string]*naiveReq{}, done: map[kvevent.WorkerRank]naiveEvent{}}
		// Every action is a step 1 ms after the last; completions are
		// timed or not (MarkPrefillCompleted, Free).
		step := 0
		next := func(timed bool) naiveEvent {
			step++
			ev := naiveEvent{step: step}
			if timed {
				ev.at = t0.Add(time.Duration(step) * time.Millisecond)
			}
			return ev
		}
		nw := rapid.SampledFrom([]int{1, 2, 66}).Draw(rt, "workers")
		var workers []kvevent.WorkerRank
		for i := range nw {
			w := kvevent.WorkerRank{ID: kvevent.WorkerID(i % 40), Rank: kvevent.DPRank(i / 40)}
			workers = append(workers, w)
			tr.AddRank(w)
		}
		// Prompts are prefixes of a few base prompts that may diverge, so
		// hashes behave like real ones (equal hash = equal prefix).
		prompt := func(label string) []uint64 {
			base := uint64(rapid.IntRange(0, 2).Draw(rt, label+"base"))
			n := rapid.IntRange(0, 10).Draw(rt, label+"len")
			div := rapid.IntRange(0, 10).Draw(rt, label+"diverge")
			alt := uint64(rapid.IntRange(1, 12).Draw(rt, label+"alt"))
			locals := make([]uint64, n)
			for i := range locals {
				locals[i] = base*100 + uint64(i)
				if i >= div {
					locals[i] += alt * 1000
				}
			}
			return kvhash.SequenceHashes(locals, nil)
		}
		nextID := 0
		ids := func() []string {
			var out []string
			for i := range nextID + 1 {
				out = append(out, fmt.Sprint(i))
			}
			return out
		}
		rt.Repeat(map[string]func(*rapid.T){
			"add": func(rt *rapid.T) {
				w := rapid.SampledFrom(workers).Draw(rt, "w")
				h := prompt("add")
				reuse := rapid.SampledFrom([]Reuse{ReuseDefault, ReuseOn, ReuseOff}).Draw(rt, "override")
				pf := rapid.IntRange(0, 100).Draw(rt, "prefill")
				exp := rapid.IntRange(0, 40).Draw(rt, "expected")
				id := fmt.Sprint(nextID)
				nextID++
				ev := next(true)
				if err := tr.AddRequest(Request{ID: id, Worker: w, BlockHashes: h, PrefillTokens: pf, ExpectedOutputTokens: exp, Reuse: reuse}, ev.at); err != nil {
					rt.Fatal(err)
				}
				r := &naiveReq{w: w, prefill: pf, frac: 1, booked: ev, expected: exp}
				s := cfg.ActiveSequenceStride
				if tr.reuse(reuse) {
					for i := range len(h) / s {
						r.tracked = append(r.tracked, h[(i+1)*s-1])
					}
				} else {
					r.private = len(h) / s * s
				}
				m.reqs[id] = r
			},
			"mark": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids()).Draw(rt, "id")
				_, live := m.reqs[id]
				ev := next(rapid.Bool().Draw(rt, "timed"))
				if tr.MarkPrefillCompletedAt(id, ev.at) != live {
					rt.Fatalf("mark %s: live=%v disagrees", id, live)
				}
				if live {
					m.complete(m.reqs[id], ev)
				}
			},
			"free": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids()).Draw(rt, "id")
				r, live := m.reqs[id]
				ev := next(rapid.Bool().Draw(rt, "timed"))
				if tr.FreeAt(id, ev.at) != live {
					rt.Fatalf("free %s: live=%v disagrees", id, live)
				}
				if live {
					m.complete(r, ev)
				}
				delete(m.reqs, id)
			},
			"generate": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids()).Draw(rt, "id")
				n := rapid.IntRange(0, 50).Draw(rt, "tokens")
				r, live := m.reqs[id]
				if tr.SetGenerated(id, n) != live {
					rt.Fatalf("generate %s: live=%v disagrees", id, live)
				}
				if live && cfg.TrackOutputBlocks {
					r.output = n / cfg.BlockSize
					if e := tr.reqs[id].expected; e > 0 {
						r.frac = math.Max(0, 1-float64(n)/float64(e))
					}
				}
			},
			"load": func(rt *rapid.T) {
				// One worker's load alone: refreshes its cache entry
				// outside Potential.
				w := rapid.SampledFrom(workers).Draw(rt, "w")
				l, _ := tr.Load(w)
				want := m.load(w)
				if math.Abs(l.ActiveBlocks-want.ActiveBlocks) > 1e-9 {
					rt.Fatalf("%v active blocks %v, model %v", w, l.ActiveBlocks, want.ActiveBlocks)
				}
				if math.Abs(l.ITLExposure-want.ITLExposure) > 1e-9 {
					rt.Fatalf("%v ITL exposure %v, model %v", w, l.ITLExposure, want.ITLExposure)
				}
				l.ITLExposure = want.ITLExposure
				if got, want := tr.PrefillSince(w), m.prefillSince(w); !got.Equal(want) {
					rt.Fatalf("%v prefill since %v, model %v", w, got, want)
				}
				if l.ActiveBlocks = want.ActiveBlocks; l != want {
					rt.Fatalf("%v: load %+v, model %+v", w, l, want)
				}
				if len(tr.dirty) > 2*len(tr.slots) {
					rt.Fatalf("%d slots listed dirty, %d slots", len(tr.dirty), len(tr.slots))
				}
			},
			"readd": func(rt *rapid.T) {
				// A worker removed (its requests freed) and added again:
				// the ranks' order and load cache are rebuilt.
				w := rapid.SampledFrom(workers).Draw(rt, "w")
				for _, id := range tr.RemoveRank(w) {
					delete(m.reqs, id)
				}
				for id, r := range m.reqs {
					if r.w == w {
						rt.Fatalf("request %s of %v not freed with it", id, w)
					}
				}
				tr.AddRank(w)
			},
			"": func(rt *rapid.T) {
				cand := prompt("cand")
				reuse := rapid.SampledFrom([]Reuse{ReuseDefault, ReuseOff}).Draw(rt, "candReuse")
				var got []Load
				if rapid.Bool().Draw(rt, "view") {
					// PotentialView, expanded as its doc says.
					loads, nb, sharers := tr.PotentialView(cand, reuse, nil)
					for _, l := range loads {
						l.NewBlocks = nb
						got = append(got, l)
					}
					for _, s := range sharers {
						got[s.Pos].NewBlocks = s.NewBlocks
					}
				} else {
					got = tr.Potential(cand, reuse, nil)
				}
				if len(got) != len(workers) {
					rt.Fatalf("potential has %d workers, want %d", len(got), len(workers))
				}
				for i, g := range got {
					want := m.load(g.Worker)
					want.NewBlocks = m.newBlocks(g.Worker, cand, tr.reuse(reuse))
					if math.Abs(g.ActiveBlocks-want.ActiveBlocks) > 1e-9 {
						rt.Fatalf("%v active blocks %v, model %v", g.Worker, g.ActiveBlocks, want.ActiveBlocks)
					}
					g.ActiveBlocks = want.ActiveBlocks
					if math.Abs(g.ITLExposure-want.ITLExposure) > 1e-9 {
						rt.Fatalf("%v ITL exposure %v, model %v", g.Worker, g.ITLExposure, want.ITLExposure)
					}
					g.ITLExposure = want.ITLExposure
					if got, want := tr.PrefillSinceAt(i), m.prefillSince(g.Worker); !got.Equal(want) {
						rt.Fatalf("%v prefill since %v, model %v", g.Worker, got, want)
					}
					if g != want {
						rt.Fatalf("%v: ledger %+v, model %+v", g.Worker, g, want)
					}
				}
			},
		})
		// Free everything: all load must be exactly zero again.
		for id := range m.reqs {
			tr.Free(id)
		}
		for _, w := range workers {
			if l, _ := tr.Load(w); l != (Load{Worker: w}) {
				rt.Fatalf("%v not idle after freeing all: %+v", w, l)
			}
		}
		for _, s := range tr.slots {
			if s != nil && (s.active.blocks != 0 || len(s.active.root.kids) != 0) {
				rt.Fatalf("%v trie keeps %d blocks, %d root kids after freeing all", s.id, s.active.blocks, len(s.active.root.kids))
			}
		}
	})
}
