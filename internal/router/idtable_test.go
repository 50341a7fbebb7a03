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

// probeLen is how many slots get(id) reads before it answers.
func (t *idTable) probeLen(id kvevent.WorkerID) int {
	mask := len(t.slots) - 1
	n := 1
	for i := t.home(id); t.slots[i].pos != 0 && t.slots[i].id != id; i = (i + 1) & mask {
		n++
	}
	return n
}

// TestIDTableResistsChosenIDs: 1,024 ids chosen to share one home slot
// under an unkeyed Fibonacci hash (k·φ⁻¹ mod 2⁶⁴, so id·φ = k: every home
// is 0) would make each lookup probe about half the table; keyed, the
// longest probe stays short. The expectation is independent of the mixer:
// at most half full, linear probing's longest run over 1,024 random keys
// is a few dozen slots with overwhelming probability, while the chosen
// ids put all 1,024 in one run. Keys are fixed so the test is
// deterministic; a fresh table draws its own.
func TestIDTableResistsChosenIDs(t *testing.T) {
	const phi = 0x9e3779b97f4a7c15
	inv := uint64(phi) // Newton's iteration for phi⁻¹ mod 2⁶⁴
	for range 6 {
		inv *= 2 - phi*inv
	}
	if inv*phi != 1 {
		t.Fatalf("inverse %#x is wrong", inv)
	}
	ids := make([]kvevent.WorkerID, 1024)
	for k := range ids {
		ids[k] = kvevent.WorkerID(uint64(k) * inv)
	}
	// The control: the old unkeyed home sends every chosen id to slot 0.
	for _, id := range ids {
		if h := (uint64(id) * phi) >> (64 - 11); h != 0 {
			t.Fatalf("id %#x: unkeyed home %d, want 0 (the attack is not what the test says)", uint64(id), h)
		}
	}
	for _, key := range []uint64{1, 0x5eed, 1 << 63, 0xdeadbeefcafef00d} {
		tab := idTable{key: key}
		tab.reset(len(ids))
		for i, id := range ids {
			tab.put(id, i)
		}
		worst := 0
		for i, id := range ids {
			if p, ok := tab.get(id); !ok || p != i {
				t.Fatalf("key %#x: get(%#x) = %d, %v; want %d", key, uint64(id), p, ok, i)
			}
			worst = max(worst, tab.probeLen(id))
		}
		if worst > 40 {
			t.Errorf("key %#x: longest probe %d slots for 1,024 ids in %d slots, want ≤ 40", key, worst, len(tab.slots))
		}
	}
	var a, b idTable
	a.reset(4)
	b.reset(4)
	if a.key == 0 || a.key == b.key {
		t.Errorf("tables drew keys %#x and %#x, want two non-zero keys", a.key, b.key)
	}
}
