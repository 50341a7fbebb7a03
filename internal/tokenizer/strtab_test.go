package tokenizer

import (
	"testing"

	"pgregory.net/rapid"
)

// TestFrozenMapMatchesMap: a frozenMap answers as the map it was built from,
// for present and absent keys alike.
func TestFrozenMapMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.StringMatching(`[a-cĠé]{0,4}`)
		m := rapid.MapOf(key, rapid.Uint32()).Draw(t, "map")
		f, err := newFrozenMap(m)
		if err != nil {
			t.Fatal(err)
		}
		if f.len() != len(m) {
			t.Fatalf("len %d, want %d", f.len(), len(m))
		}
		for _, k := range rapid.SliceOf(key).Draw(t, "probes") {
			got, ok := f.get(k)
			want, wok := m[k]
			if got != want || ok != wok {
				t.Fatalf("get(%q) = %d, %v; want %d, %v", k, got, ok, want, wok)
			}
		}
		n := 0
		f.all(func(k string, v uint32) {
			if m[k] != v {
				t.Fatalf("all: %q = %d, want %d", k, v, m[k])
			}
			n++
		})
		if n != len(m) {
			t.Fatalf("all: %d keys, want %d", n, len(m))
		}
	})
}

func TestStringTable(t *testing.T) {
	in := []string{"", "a", "", "Ġworld", "é", ""}
	tab, err := newStringTable(in)
	if err != nil {
		t.Fatal(err)
	}
	if tab.len() != len(in) {
		t.Fatalf("len %d, want %d", tab.len(), len(in))
	}
	for i, s := range in {
		if tab.at(i) != s {
			t.Errorf("at(%d) = %q, want %q", i, tab.at(i), s)
		}
	}
}
