package timeline

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// model is the naive ring: every slot ever put, the newest value per slot,
// puts refused by the same rule (older than newest - n).
type model struct {
	n      int64
	vals   map[int64]int
	newest int64
}

func (m *model) put(s int64, v int) bool {
	if s < 0 || (m.newest >= 0 && s <= m.newest-m.n) {
		return false
	}
	m.vals[s] = v
	m.newest = max(m.newest, s)
	return true
}

// window is what Window(last) must return: slots last-n+1 … last that were
// put and are not older than newest-n (those the ring has overwritten).
func (m *model) window(last int64) []int64 {
	var out []int64
	for _, s := range slices.Sorted(maps.Keys(m.vals)) {
		if s > last-m.n && s <= last && s > m.newest-m.n {
			out = append(out, s)
		}
	}
	return out
}

func TestRingMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		r := NewRing[int](time.Second, n)
		m := &model{n: int64(n), vals: map[int64]int{}, newest: -1}
		cur := rapid.Int64Range(0, 50).Draw(t, "start")
		for i := range rapid.IntRange(1, 200).Draw(t, "ops") {
			// Mostly forward, sometimes a jump past the span, sometimes back.
			cur = max(0, cur+rapid.Int64Range(-int64(n)-2, 2*int64(n)+2).Draw(t, "delta"))
			if rapid.Bool().Draw(t, "put") {
				if got, want := r.Put(cur, i), m.put(cur, i); got != want {
					t.Fatalf("Put(%d) = %v, model %v", cur, got, want)
				}
			}
			last := cur + rapid.Int64Range(-2, int64(n)+2).Draw(t, "look")
			var got []int64
			for _, p := range r.Window(last) {
				got = append(got, p.Slot)
				if p.V != m.vals[p.Slot] {
					t.Fatalf("slot %d holds %d, model %d", p.Slot, p.V, m.vals[p.Slot])
				}
				if !p.Start.Equal(time.Unix(p.Slot, 0)) {
					t.Fatalf("slot %d starts at %v", p.Slot, p.Start)
				}
			}
			if diff := cmp.Diff(m.window(last), got); diff != "" {
				t.Fatalf("Window(%d) (-model +ring):\n%s", last, diff)
			}
		}
	})
}

func TestRingSlotOf(t *testing.T) {
	r := NewRing[int](5*time.Second, 3)
	for _, c := range []struct {
		t    time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(4, 999_999_999), 0},
		{time.Unix(5, 0), 1},
		{time.Unix(1_000_000_003, 0), 200_000_000},
		{time.Unix(-7, 0), 0},
	} {
		if got := r.SlotOf(c.t); got != c.want {
			t.Errorf("SlotOf(%v) = %d, want %d", c.t.Unix(), got, c.want)
		}
	}
	if got := r.SlotStart(3); !got.Equal(time.Unix(15, 0)) {
		t.Errorf("SlotStart(3) = %v", got)
	}
}
