package router

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"pgregory.net/rapid"
)

// TestIDTableMatchesMap: the rank-position table answers as a Go map of
// the same ids would, for ids that collide in their home slot (small and
// large values, multiples of powers of two), absent ids, an empty table
// and a table reset for another set.
func TestIDTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var tab idTable
		if _, ok := tab.get(1); ok {
			rt.Fatal("zero table finds id 1")
		}
		for round := range 3 {
			ids := rapid.SliceOfNDistinct(rapid.SampledFrom([]uint64{0, 1, 2, 3, 7, 64, 128, 1 << 32, 1<<63 + 1, ^uint64(0)}),
				0, 10, rapid.ID[uint64]).Draw(rt, "ids")
			more := rapid.SliceOfNDistinct(rapid.Uint64(), 0, 200, rapid.ID[uint64]).Draw(rt, "more")
			want := map[kvevent.WorkerID]int{}
			for _, id := range append(ids, more...) {
				if _, dup := want[kvevent.WorkerID(id)]; !dup {
					want[kvevent.WorkerID(id)] = len(want) * 3
				}
			}
			tab.reset(len(want))
			for id, p := range want {
				tab.put(id, p)
			}
			probes := rapid.SliceOfN(rapid.Uint64(), 0, 50).Draw(rt, "probes")
			for id := range want {
				probes = append(probes, uint64(id))
			}
			for _, v := range probes {
				id := kvevent.WorkerID(v)
				p, ok := tab.get(id)
				wp, wok := want[id]
				if ok != wok || p != wp {
					rt.Fatalf("round %d: get(%d) = %d, %v; map has %d, %v", round, id, p, ok, wp, wok)
				}
			}
		}
	})
}
