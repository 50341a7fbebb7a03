package index

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// TestFleetMatchesModel checks the index against the naive model on
// fleets of up to 300 worker ranks that all start from one shared
// "system prompt" chain, so that nodes have hundreds of holders and
// queries split such holder sets at every depth (the query's large-fleet
// path), before and after random events (genEvent: stores on any tier,
// removals, Cleared) and worker removals.
func TestFleetMatchesModel(t *testing.T) {
	saved := workers
	defer func() { workers = saved }()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(8, 300).Draw(t, "fleet")
		workers = make([]kvevent.WorkerRank, n)
		for i := range workers {
			workers[i] = kvevent.WorkerRank{ID: kvevent.WorkerID(i/2 + 1), Rank: kvevent.DPRank(i % 2)}
		}
		x := newPlain(t)
		m := newModel()
		known := map[kvevent.WorkerRank][][]uint64{}
		system := drawPath(t, "system", 4)
		for _, w := range workers {
			ev := kvevent.Event{Worker: w, Kind: kvevent.Stored}
			for i := range system {
				ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: engineHash(system[:i+1], 0), LocalHash: system[i]})
				known[w] = append(known[w], append([]uint64(nil), system[:i+1]...))
			}
			x.apply(ev)
			m.apply(ev)
		}
		check := func(q []uint64) {
			if diff := cmp.Diff(m.query(q), x.query(q)); diff != "" {
				t.Fatalf("query %v: (-model +index)\n%s", q, diff)
			}
		}
		check(system)
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 20).Draw(t, "op") {
			case 0:
				id := rapid.SampledFrom(workers).Draw(t, "rmWorker").ID
				x.removeWorker(id)
				m.removeWorker(id)
			case 1, 2, 3:
				check(drawPath(t, "query", 6))
			default:
				ev := genEvent(t, known)
				x.apply(ev)
				m.apply(ev)
			}
		}
		check(system)
		for l := uint64(1); l <= 3; l++ {
			check(append(append([]uint64(nil), system...), l))
		}
	})
}
