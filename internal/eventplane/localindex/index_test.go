package localindex

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"pgregory.net/rapid"
)

var w = kvevent.WorkerRank{ID: 7, Rank: 1}

func stored(parent uint64, hasParent bool, hs ...uint64) kvevent.Event {
	ev := kvevent.Event{Kind: kvevent.Stored, Parent: parent, HasParent: hasParent}
	for _, h := range hs {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: h, LocalHash: h + 1000})
	}
	return ev
}

func TestRangeAndErrors(t *testing.T) {
	x := New(w, 4)
	evs := x.Apply([]kvevent.Event{stored(0, false, 1, 2), stored(2, true, 3), {Kind: kvevent.Removed, Removed: []uint64{3}}})
	if evs[0].ID != 0 || evs[2].ID != 2 || evs[1].Worker != w {
		t.Fatalf("stamping: %+v", evs)
	}
	got, err := x.EventsRange(1, 99)
	if err != nil || len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("range 1..: %+v %v", got, err)
	}
	if got, err := x.EventsRange(0, 0); err != nil || len(got) != 1 || got[0].ID != 0 || got[0].Blocks[1].EngineHash != 2 {
		t.Fatalf("range 0..0 (id 0 is the first event): %+v %v", got, err)
	}
	for _, c := range []struct {
		from, to uint64
		want     error
	}{{1, 0, ErrInvalidRange}, {3, 2, ErrInvalidRange}, {3, 9, ErrTooNew}} {
		if _, err := x.EventsRange(c.from, c.to); !errors.Is(err, c.want) {
			t.Errorf("range %d..%d: %v, want %v", c.from, c.to, err, c.want)
		}
	}
	// Wrap the ring: 6 events, capacity 4 → ids 3..6 kept.
	x.Apply([]kvevent.Event{stored(0, false, 9), stored(9, true, 10), stored(10, true, 11)})
	if _, err := x.EventsRange(1, 5); !errors.Is(err, ErrGone) {
		t.Fatalf("old range: %v", err)
	}
	got, err = x.EventsRange(2, 5)
	if err != nil || len(got) != 4 || got[0].ID != 2 || got[3].ID != 5 || got[3].Blocks[0].EngineHash != 11 {
		t.Fatalf("wrapped range: %+v %v", got, err)
	}
	if last, ok := x.LastEventID(); last != 5 || !ok {
		t.Fatalf("last id %d %v, want 5", last, ok)
	}
}

// Ids count from 0: an empty index has no last event, the first event is
// id 0 and is a real, buffered event; Reset starts over at 0.
func TestIDsCountFromZero(t *testing.T) {
	x := New(w, 4)
	if last, ok := x.LastEventID(); ok || last != 0 {
		t.Fatalf("empty index: last %d %v", last, ok)
	}
	if _, err := x.EventsRange(0, 0); !errors.Is(err, ErrTooNew) {
		t.Fatalf("range of an empty index: %v", err)
	}
	if last, evs := x.Dump(); last != 0 || len(evs) != 0 {
		t.Fatalf("empty dump: %d %v", last, evs)
	}
	evs := x.Apply([]kvevent.Event{stored(0, false, 5)})
	if evs[0].ID != 0 {
		t.Fatalf("first id %d, want 0", evs[0].ID)
	}
	if last, ok := x.LastEventID(); !ok || last != 0 {
		t.Fatalf("after one event: last %d %v", last, ok)
	}
	if last, dump := x.Dump(); last != 0 || len(dump) != 1 || dump[0].ID != 0 {
		t.Fatalf("dump after one event: %d %+v", last, dump)
	}
	x.Reset()
	if _, ok := x.LastEventID(); ok {
		t.Fatal("reset index still has a last event")
	}
	if evs := x.Apply([]kvevent.Event{stored(0, false, 6)}); evs[0].ID != 0 {
		t.Fatalf("first id after reset %d, want 0", evs[0].ID)
	}
}

// The engine's events applied to the index leave exactly the engine's
// cached set, and a dump replayed into an empty index rebuilds it with
// every parent before its children.
func TestDumpRebuildsEngineCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := mocker.DefaultConfig()
		c.BlockSize = 2
		c.NumGPUBlocks = rapid.IntRange(6, 40).Draw(t, "gpu")
		c.NumCPUBlocks = rapid.SampledFrom([]int{0, 10}).Draw(t, "cpu")
		c.Watermark = 0
		e, err := mocker.NewEngine(c)
		if err != nil {
			t.Fatal(err)
		}
		x := New(w, rapid.IntRange(1, 50).Draw(t, "cap"))
		n := rapid.IntRange(1, 30).Draw(t, "n")
		for i := range n {
			toks := rapid.SliceOfN(rapid.Uint32Range(0, 3), 1, 12).Draw(t, "toks")
			_ = e.Add(mocker.Request{ID: uint64(i), Tokens: toks, MaxTokens: rapid.IntRange(1, 5).Draw(t, "max")})
			for range rapid.IntRange(0, 3).Draw(t, "steps") {
				feed(x, e.Step().Events)
			}
		}
		for !e.Idle() {
			feed(x, e.Step().Events)
		}
		for _, tier := range []kvevent.Tier{kvevent.TierDevice, kvevent.TierHostPinned} {
			want := e.CachedHashes(tier, nil)
			if x.Len(tier) != len(want) {
				t.Fatalf("tier %v: index %d blocks, engine %d", tier, x.Len(tier), len(want))
			}
		}
		last, dump := x.Dump()
		if l, _ := x.LastEventID(); last != l {
			t.Fatal("dump id")
		}
		y := New(w, 0)
		seen := map[kvevent.Tier]map[uint64]bool{0: {}, 1: {}}
		for _, ev := range dump {
			if ev.HasParent && x.blocks[ev.Tier][ev.Parent] != (block{}) && !seen[ev.Tier][ev.Parent] {
				t.Fatalf("dump lists a child before its parent")
			}
			seen[ev.Tier][ev.Blocks[0].EngineHash] = true
		}
		y.Apply(dump)
		for tier := range kvevent.Tier(2) {
			if !mapsEqual(x.blocks[tier], y.blocks[tier]) {
				t.Fatalf("tier %v: dump does not rebuild the index", tier)
			}
			got := slices.Sorted(keysOf(y.blocks[tier]))
			want := e.CachedHashes(tier, nil)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("tier %v: rebuilt %v, engine %v", tier, got, want)
			}
		}
	})
}

func feed(x *Index, evs []mocker.Event) {
	kv := make([]kvevent.Event, len(evs))
	for i, ev := range evs {
		kv[i] = ev.KVEvent(w)
	}
	x.Apply(kv)
}

func mapsEqual(a, b map[uint64]block) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keysOf(m map[uint64]block) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
