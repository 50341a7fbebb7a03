package mocker

import (
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// cacheModel is the naive consumer of the engine's events: one set of
// engine hashes per tier. It checks what a strict index would: a stored
// block is new and its parent (device tier) is present, a removed block is
// present.
type cacheModel struct {
	sets map[kvevent.Tier]map[uint64]bool
}

func newCacheModel() *cacheModel {
	return &cacheModel{sets: map[kvevent.Tier]map[uint64]bool{
		kvevent.TierDevice: {}, kvevent.TierHostPinned: {},
	}}
}

func (m *cacheModel) apply(evs []Event) error {
	for _, ev := range evs {
		set := m.sets[ev.Tier]
		switch ev.Kind {
		case kvevent.Stored:
			if len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
				return fmt.Errorf("stored %d hashes with %d tokens", len(ev.Hashes), len(ev.Tokens))
			}
			if ev.Tier == kvevent.TierDevice && ev.HasParent && !set[ev.Parent] {
				return fmt.Errorf("stored block's parent %d is not cached", ev.Parent)
			}
			for _, h := range ev.Hashes {
				if set[h] {
					return fmt.Errorf("block %d stored twice on %v", h, ev.Tier)
				}
				set[h] = true
			}
		case kvevent.Removed:
			for _, h := range ev.Hashes {
				if !set[h] {
					return fmt.Errorf("removed unknown block %d on %v", h, ev.Tier)
				}
				delete(set, h)
			}
		case kvevent.Cleared:
			for _, s := range m.sets {
				clear(s)
			}
		}
	}
	return nil
}

func (m *cacheModel) equal(tier kvevent.Tier, hashes []uint64) bool {
	set := m.sets[tier]
	if len(set) != len(hashes) {
		return false
	}
	slices.Sort(hashes)
	for i, h := range hashes {
		if !set[h] || (i > 0 && hashes[i-1] == h) {
			return false
		}
	}
	return true
}
