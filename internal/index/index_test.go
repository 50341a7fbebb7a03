package index

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// target is what the property suite drives: the plain index, or the
// plain index reserving as it goes.
type target interface {
	apply(kvevent.Event)
	removeWorker(kvevent.WorkerID)
	query([]uint64) []Score
	dump() []kvevent.Event
	stats() Stats
}

type plain struct{ x *Index }

func (p plain) apply(ev kvevent.Event)           { _ = p.x.Apply(&ev) }
func (p plain) removeWorker(id kvevent.WorkerID) { p.x.RemoveWorker(id) }
func (p plain) dump() []kvevent.Event            { return p.x.Dump() }
func (p plain) stats() Stats                     { return p.x.Stats() }
func (p plain) query(local []uint64) []Score {
	var s Scores
	p.x.Query(local, &s)
	out := append([]Score(nil), s.List...)
	sortScores(out)
	return out
}

// engineHash is how the simulated engines name blocks: a chain hash of
// the prefix, salted per worker when salt is set (engines need not share a
// seed).
func engineHash(prefix []uint64, salt uint64) uint64 {
	h := salt*0x9e3779b97f4a7c15 + 7
	for _, l := range prefix {
		h = (h ^ l) * 0x100000001b3
		h ^= h >> 29
	}
	return h
}

var workers = []kvevent.WorkerRank{{ID: 1}, {ID: 1, Rank: 1}, {ID: 2}, {ID: 7, Rank: 3}}

func drawPath(t *rapid.T, label string, maxLen int) []uint64 {
	return rapid.SliceOfN(rapid.Uint64Range(1, 3), 1, maxLen).Draw(t, label)
}

// genEvent draws an event: mostly well-formed chains (engine hashes derived
// from the prefix) with some unknown parents, foreign hashes and odd tiers.
func genEvent(t *rapid.T, known map[kvevent.WorkerRank][][]uint64) kvevent.Event {
	w := rapid.SampledFrom(workers).Draw(t, "worker")
	salt := uint64(w.ID) * rapid.Uint64Range(0, 1).Draw(t, "salted")
	tier := kvevent.Tier(rapid.SampledFrom([]uint8{0, 0, 0, 1, 2}).Draw(t, "tier"))
	ev := kvevent.Event{Worker: w, Tier: tier}
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		ev.Kind = kvevent.Cleared
	case 1, 2, 3:
		ev.Kind = kvevent.Removed
		n := rapid.IntRange(1, 3).Draw(t, "nrem")
		for range n {
			if ps := known[w]; len(ps) > 0 && rapid.Bool().Draw(t, "remKnown") {
				ev.Removed = append(ev.Removed, engineHash(rapid.SampledFrom(ps).Draw(t, "remPath"), salt))
			} else {
				ev.Removed = append(ev.Removed, engineHash(drawPath(t, "remRand", 4), salt))
			}
		}
	default:
		ev.Kind = kvevent.Stored
		var prefix []uint64
		if ps := known[w]; len(ps) > 0 && rapid.IntRange(0, 2).Draw(t, "withParent") > 0 {
			prefix = rapid.SampledFrom(ps).Draw(t, "parentPath")
		} else if rapid.IntRange(0, 5).Draw(t, "randParent") == 0 {
			prefix = drawPath(t, "parentRand", 3)
		}
		if len(prefix) > 0 {
			ev.HasParent = true
			ev.Parent = engineHash(prefix, salt)
		}
		n := rapid.IntRange(1, 4).Draw(t, "nblocks")
		p := append([]uint64(nil), prefix...)
		for range n {
			p = append(p, rapid.Uint64Range(1, 3).Draw(t, "local"))
			eh := engineHash(p, salt)
			if rapid.IntRange(0, 20).Draw(t, "foreign") == 0 {
				eh = rapid.Uint64Range(1, 5).Draw(t, "foreignHash")
			}
			ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: eh, LocalHash: p[len(p)-1]})
			known[w] = append(known[w], append([]uint64(nil), p...))
		}
	}
	return ev
}

func checkAgainstModel(t *rapid.T, tg target, mk func() target) {
	m := newModel()
	known := map[kvevent.WorkerRank][][]uint64{}
	steps := rapid.IntRange(1, 60).Draw(t, "steps")
	for range steps {
		switch rapid.IntRange(0, 12).Draw(t, "op") {
		case 0:
			id := rapid.SampledFrom(workers).Draw(t, "rmWorker").ID
			tg.removeWorker(id)
			m.removeWorker(id)
		case 1, 2:
			q := drawPath(t, "query", 6)
			if diff := cmp.Diff(m.query(q), tg.query(q)); diff != "" {
				t.Fatalf("query %v: (-model +index)\n%s", q, diff)
			}
		default:
			ev := genEvent(t, known)
			tg.apply(ev)
			m.apply(ev)
		}
	}
	// Every path up to depth 4 over the alphabet.
	var paths [][]uint64
	var gen func(p []uint64)
	gen = func(p []uint64) {
		if len(p) > 0 {
			paths = append(paths, append([]uint64(nil), p...))
		}
		if len(p) == 4 {
			return
		}
		for l := uint64(1); l <= 3; l++ {
			gen(append(p, l))
		}
	}
	gen(nil)
	for _, q := range paths {
		if diff := cmp.Diff(m.query(q), tg.query(q)); diff != "" {
			t.Fatalf("final query %v: (-model +index)\n%s", q, diff)
		}
	}
	// Dump and restore rebuild an identical index.
	d := tg.dump()
	re := mk()
	for _, ev := range d {
		re.apply(ev)
	}
	for _, q := range paths {
		if diff := cmp.Diff(tg.query(q), re.query(q)); diff != "" {
			t.Fatalf("restored query %v: (-orig +restored)\n%s", q, diff)
		}
	}
	if diff := cmp.Diff(d, re.dump(), cmp.Comparer(func(a, b []kvevent.Block) bool { return cmp.Equal(len(a), len(b)) && (len(a) == 0 || cmp.Equal(a, b)) })); diff != "" {
		t.Fatalf("dump of restored index differs:\n%s", diff)
	}
	st, rs := tg.stats(), re.stats()
	if st.Nodes != rs.Nodes || st.Entries != rs.Entries {
		t.Fatalf("restored sizes differ: nodes %d vs %d, entries %d vs %d", st.Nodes, rs.Nodes, st.Entries, rs.Entries)
	}
}

func newPlain(t interface{ Fatalf(string, ...any) }) target {
	x, err := New(DefaultConfig())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return plain{x}
}

func TestIndexMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkAgainstModel(t, newPlain(t), func() target { return newPlain(t) })
	})
}
