package index

import (
	"testing"

	"pgregory.net/rapid"
)

// The engine table against a Go map with counts, through inserts,
// reference bumps, decrements, deletes and the resizes they cause.
func TestEngineTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tb engineTable
		want := map[uint64][2]uint32{} // node, refs
		keys := rapid.SliceOfN(rapid.Uint64(), 1, 64).Draw(t, "keys")
		for range rapid.IntRange(1, 400).Draw(t, "steps") {
			k := rapid.SampledFrom(keys).Draw(t, "k")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				i, present := tb.reserve(k)
				if _, ok := want[k]; ok != present {
					t.Fatalf("reserve(%d) present=%v, want %v", k, present, ok)
				}
				if present {
					tb.incr(k)
					w := want[k]
					want[k] = [2]uint32{w[0], w[1] + 1}
				} else {
					nd := uint32(len(want) + 1)
					tb.fill(i, k, nd)
					want[k] = [2]uint32{nd, 1}
				}
			case 2:
				if w, ok := want[k]; ok {
					last := tb.decr(k)
					if last != (w[1] == 1) {
						t.Fatalf("decr(%d) last=%v with refs %d", k, last, w[1])
					}
					if last {
						delete(want, k)
					} else {
						want[k] = [2]uint32{w[0], w[1] - 1}
					}
				}
			case 3:
				tb.del(k)
				delete(want, k)
			}
			if tb.n != len(want) {
				t.Fatalf("size %d, want %d", tb.n, len(want))
			}
		}
		for _, k := range keys {
			w := want[k]
			if tb.get(k) != w[0] || tb.refs(k) != w[1] {
				t.Fatalf("key %d: node %d refs %d, want %v", k, tb.get(k), tb.refs(k), w)
			}
		}
	})
}
