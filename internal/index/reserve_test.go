package index

import (
	"errors"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// reserving drives a target and reserves random sizes (tiny ones too, so
// that floors, growth past a reservation and shrinking down to it all
// happen) for random workers before its events: reservations must change
// no answer.
type reserving struct {
	target
	t       *rapid.T
	reserve func(kvevent.WorkerRank, int) error
}

func (r reserving) apply(ev kvevent.Event) {
	if rapid.IntRange(0, 3).Draw(r.t, "reserve") == 0 {
		w := rapid.SampledFrom(workers).Draw(r.t, "reserveWorker")
		n := rapid.SampledFrom([]int{0, 1, 2, 7, 40, 3000}).Draw(r.t, "reserveBlocks")
		if err := r.reserve(w, n); err != nil {
			r.t.Fatalf("Reserve(%v, %d): %v", w, n, err)
		}
	}
	r.target.apply(ev)
}

func TestReserveMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		mk := func() target {
			p := newPlain(t).(plain)
			return reserving{target: p, t: t, reserve: p.x.Reserve}
		}
		checkAgainstModel(t, mk(), mk)
	})
}

func deviceSlots(x *Index, w kvevent.WorkerRank) int {
	id, ok := x.byKey[holderKey{w, kindExact}]
	if !ok || x.tabs[id].engine[kvevent.TierDevice] == nil {
		return 0
	}
	return len(x.tabs[id].engine[kvevent.TierDevice].slots)
}

// TestReserveGrowsLazilyAndKeepsIt pins the sizing policy: a reserved
// table starts small and grows with the entries stored (a lightly filled
// worker costs little whatever its capacity), and once grown it never
// shrinks below the reservation, across Cleared, until Reserve(w, 0) or
// RemoveWorker.
func TestReserveGrowsLazilyAndKeepsIt(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	if err := x.Reserve(w1, 3000); err != nil {
		t.Fatal(err)
	}
	// 3000 entries fit at <= 75 % load in 4096 slots.
	ls := make([]uint64, 3000)
	for i := range ls {
		ls[i] = uint64(i + 1)
	}
	rm := kvevent.Event{Worker: w1, Kind: kvevent.Removed}
	for i := len(ls) - 1; i >= 0; i-- {
		rm.Removed = append(rm.Removed, 100+uint64(i))
	}
	// One block: a small table, not the reserved 4096 slots.
	if err := apply(t, x, chain(w1, 0, 100, ls[:1]...)); err != nil {
		t.Fatal(err)
	}
	if got := deviceSlots(x, w1); got >= 4096 || got == 0 {
		t.Fatalf("one block in a reserved table: %d slots, want a small table", got)
	}
	_ = apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{100}})
	if err := apply(t, x, chain(w1, 0, 100, ls...)); err != nil {
		t.Fatal(err)
	}
	if got := deviceSlots(x, w1); got != 4096 {
		t.Fatalf("3000 blocks: %d slots, want 4096", got)
	}
	// Removing everything does not shrink it below the reservation.
	if err := apply(t, x, rm); err != nil {
		t.Fatal(err)
	}
	if got := deviceSlots(x, w1); got != 4096 {
		t.Fatalf("after removing all: %d slots, want 4096", got)
	}
	// A Cleared worker keeps its reservation: a fresh table, small at
	// first, that again stays at 4096 once grown and emptied.
	_ = apply(t, x, chain(w1, 0, 100, 1))
	_ = apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Cleared})
	_ = apply(t, x, chain(w1, 0, 100, ls...))
	_ = apply(t, x, rm)
	if got := deviceSlots(x, w1); got != 4096 {
		t.Fatalf("after Cleared, filling and emptying: %d slots, want 4096", got)
	}
	// Reserve(w, 0) ends it: the table may shrink again on removals.
	if err := x.Reserve(w1, 0); err != nil {
		t.Fatal(err)
	}
	_ = apply(t, x, chain(w1, 0, 100, 1))
	_ = apply(t, x, kvevent.Event{Worker: w1, Kind: kvevent.Removed, Removed: []uint64{100}})
	if got := deviceSlots(x, w1); got >= 4096 {
		t.Fatalf("after ending the reservation: %d slots, want fewer than 4096", got)
	}
	// RemoveWorker forgets the reservation.
	_ = x.Reserve(w2, 3000)
	_ = apply(t, x, chain(w2, 0, 100, ls...))
	x.RemoveWorker(w2.ID)
	_ = apply(t, x, chain(w2, 0, 100, ls...))
	_ = apply(t, x, kvevent.Event{Worker: w2, Kind: kvevent.Removed, Removed: rm.Removed})
	_ = apply(t, x, chain(w2, 0, 100, 1))
	if got := deviceSlots(x, w2); got >= 4096 {
		t.Fatalf("w2 after RemoveWorker, filling and emptying: %d slots, want it shrunk", got)
	}
	// Other tiers are not reserved.
	_ = x.Reserve(w1r1, 3000)
	ev := chain(w1r1, 0, 100, ls...)
	ev.Tier = kvevent.TierHostPinned
	_ = apply(t, x, ev)
	rmHost := kvevent.Event{Worker: w1r1, Kind: kvevent.Removed, Tier: kvevent.TierHostPinned, Removed: rm.Removed}
	_ = apply(t, x, rmHost)
	_ = apply(t, x, func() kvevent.Event { e := chain(w1r1, 0, 100, 1); e.Tier = kvevent.TierHostPinned; return e }())
	id := x.byKey[holderKey{w1r1, kindExact}]
	if got := len(x.tabs[id].engine[kvevent.TierHostPinned].slots); got >= 4096 {
		t.Fatalf("host tier table has %d slots after emptying, want it shrunk", got)
	}
}

func TestReserveRefusesOutOfRange(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	for _, n := range []int{-1, MaxReserveBlocks + 1} {
		if err := x.Reserve(w1, n); !errors.Is(err, ErrInvalid) {
			t.Errorf("Index.Reserve(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if len(x.reserved) != 0 {
		t.Fatalf("refused reservations were kept: %v", x.reserved)
	}
}

func TestReservedSlots(t *testing.T) {
	for _, c := range []struct{ blocks, slots int }{
		{0, 0}, {1, 8}, {6, 8}, {7, 16}, {12, 16}, {13, 32}, {16384, 32768}, {24576, 32768}, {24577, 65536},
	} {
		if got := reservedSlots(c.blocks); got != c.slots {
			t.Errorf("reservedSlots(%d) = %d, want %d", c.blocks, got, c.slots)
		}
	}
}
