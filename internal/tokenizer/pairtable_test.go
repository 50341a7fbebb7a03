package tokenizer

import (
	"testing"

	"pgregory.net/rapid"
)

// TestPairTableMatchesMap checks the flat table against a Go map.
func TestPairTableMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := newPairTable(rapid.IntRange(0, 50).Draw(t, "hint"))
		want := map[uint64]uint64{}
		keys := rapid.SliceOf(rapid.Uint64Range(0, 1<<40)).Draw(t, "keys")
		for i, k := range keys {
			tab.set(k, uint64(i))
			want[k] = uint64(i)
		}
		if tab.len() != len(want) {
			t.Fatalf("len %d, want %d", tab.len(), len(want))
		}
		for k, v := range want {
			if got, ok := tab.get(k); !ok || got != v {
				t.Fatalf("get(%d) = %d, %v; want %d", k, got, ok, v)
			}
		}
		probe := rapid.Uint64Range(0, 1<<40).Draw(t, "probe")
		if _, ok := tab.get(probe); ok != (want[probe] != 0 || contains(keys, probe)) {
			t.Fatalf("get(%d) presence wrong", probe)
		}
	})
}

func contains(s []uint64, x uint64) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
