package kveventtest

import (
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func TestViewWorkedExample(t *testing.T) {
	var v View
	w, other := kvevent.WorkerRank{ID: 1}, kvevent.WorkerRank{ID: 2}
	v.ApplyEvent(kvevent.Event{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 10, LocalHash: 100}, {EngineHash: 11, LocalHash: 101}}})
	v.ApplyEvent(kvevent.Event{Worker: w, Tier: kvevent.TierHostPinned, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 10, LocalHash: 100}}})
	v.ApplyEvent(kvevent.Event{Worker: other, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 7, LocalHash: 70}}})
	v.ApplyEvent(kvevent.Event{Worker: w, Kind: kvevent.Removed, Removed: []uint64{11, 99}})
	want := map[Key]uint64{{kvevent.TierDevice, 10}: 100, {kvevent.TierHostPinned, 10}: 100}
	if got := v.Get(w); !maps.Equal(got, want) {
		t.Fatalf("after removal: %v, want %v", got, want)
	}
	v.ApplyEvent(kvevent.Event{Worker: w, Kind: kvevent.Cleared})
	if got := v.Get(w); len(got) != 0 {
		t.Fatalf("after clear: %v", got)
	}
	if got := v.Get(other); !maps.Equal(got, map[Key]uint64{{kvevent.TierDevice, 7}: 70}) {
		t.Fatalf("other worker touched: %v", got)
	}
}
