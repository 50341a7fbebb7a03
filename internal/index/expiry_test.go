package index

import (
	"testing"

	"pgregory.net/rapid"
)

// expiryTable against a Go map: ids from narrow and wide ranges (the table
// groups consecutive ids, so dense ranges and ids that share a group are
// the interesting cases), growth past 1024 slots and shrinking back.
func TestExpiryTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tab expiryTable
		want := map[uint32]int64{}
		hi := rapid.SampledFrom([]uint32{40, 3000, 1 << 31}).Draw(t, "range")
		for range rapid.IntRange(1, 3000).Draw(t, "steps") {
			id := rapid.Uint32Range(1, hi).Draw(t, "id")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				e := rapid.Int64().Draw(t, "exp")
				_, had := want[id]
				if isNew := tab.set(id, e); isNew == had {
					t.Fatalf("set(%d): new %v, map had it %v", id, isNew, had)
				}
				want[id] = e
			case 2:
				_, had := want[id]
				if got := tab.del(id); got != had {
					t.Fatalf("del(%d) = %v, want %v", id, got, had)
				}
				delete(want, id)
			default:
				e, ok := tab.get(id)
				we, wok := want[id]
				if ok != wok || e != we {
					t.Fatalf("get(%d) = %d, %v; want %d, %v", id, e, ok, we, wok)
				}
			}
			if tab.n != len(want) {
				t.Fatalf("%d entries, want %d", tab.n, len(want))
			}
		}
		seen := 0
		tab.each(func(id uint32, e int64) {
			if want[id] != e {
				t.Fatalf("each: %d -> %d, want %d", id, e, want[id])
			}
			seen++
		})
		if seen != len(want) {
			t.Fatalf("each saw %d, want %d", seen, len(want))
		}
	})
}
