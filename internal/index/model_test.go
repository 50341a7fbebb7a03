package index

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// model is the naive reference: per worker rank and tier, engine hash ->
// (full prefix of local hashes as a string key, refcount). A worker holds
// a prefix when any of its entries names it.
type model struct {
	w map[kvevent.WorkerRank]*[kvevent.NumTiers]map[uint64]*mentry
}

type mentry struct {
	prefix string
	refs   int
}

func newModel() *model {
	return &model{w: map[kvevent.WorkerRank]*[kvevent.NumTiers]map[uint64]*mentry{}}
}

func key(p []uint64) string {
	var b strings.Builder
	for _, h := range p {
		fmt.Fprintf(&b, "%d/", h)
	}
	return b.String()
}

func (m *model) tiers(w kvevent.WorkerRank) *[kvevent.NumTiers]map[uint64]*mentry {
	t := m.w[w]
	if t == nil {
		t = &[kvevent.NumTiers]map[uint64]*mentry{}
		for i := range t {
			t[i] = map[uint64]*mentry{}
		}
		m.w[w] = t
	}
	return t
}

// heldMask returns the tier mask of prefix p for w.
func (m *model) heldMask(w kvevent.WorkerRank, p string) uint8 {
	t := m.w[w]
	if t == nil {
		return 0
	}
	var mask uint8
	for i := range t {
		for _, e := range t[i] {
			if e.prefix == p {
				mask |= 1 << i
			}
		}
	}
	return mask
}

func (m *model) apply(ev kvevent.Event) {
	switch ev.Kind {
	case kvevent.Cleared:
		delete(m.w, ev.Worker)
	case kvevent.Removed:
		t := m.w[ev.Worker]
		if t == nil {
			return
		}
		for _, h := range ev.Removed {
			e, ok := t[ev.Tier][h]
			if !ok {
				continue
			}
			e.refs--
			if e.refs > 0 {
				continue
			}
			delete(t[ev.Tier], h)
			if m.heldMask(ev.Worker, e.prefix) == 0 {
				// Drop everything the worker holds below the prefix.
				for i := range t {
					for k, o := range t[i] {
						if strings.HasPrefix(o.prefix, e.prefix) {
							delete(t[i], k)
						}
					}
				}
			}
		}
		m.gc(ev.Worker)
	case kvevent.Stored:
		if len(ev.Blocks) == 0 {
			return
		}
		if ev.HasParent {
			for _, b := range ev.Blocks {
				if b.EngineHash == ev.Parent {
					return
				}
			}
		}
		prefix := ""
		if ev.HasParent {
			t := m.w[ev.Worker]
			if t == nil {
				return
			}
			e, ok := t[ev.Tier][ev.Parent]
			for i := 0; !ok && i < kvevent.NumTiers; i++ {
				e, ok = t[i][ev.Parent]
			}
			if !ok {
				return
			}
			prefix = e.prefix
		}
		t := m.tiers(ev.Worker)
		for _, b := range ev.Blocks {
			p := prefix + fmt.Sprintf("%d/", b.LocalHash)
			if e, ok := t[ev.Tier][b.EngineHash]; ok {
				if e.prefix != p {
					break
				}
				e.refs++
				prefix = p
				continue
			}
			if m.heldMask(ev.Worker, p)&(1<<ev.Tier) != 0 {
				break
			}
			t[ev.Tier][b.EngineHash] = &mentry{prefix: p, refs: 1}
			prefix = p
		}
		m.gc(ev.Worker)
	}
}

func (m *model) gc(w kvevent.WorkerRank) {
	if t := m.w[w]; t != nil {
		for i := range t {
			if len(t[i]) > 0 {
				return
			}
		}
		delete(m.w, w)
	}
}

func (m *model) removeWorker(id kvevent.WorkerID) {
	for w := range m.w {
		if w.ID == id {
			delete(m.w, w)
		}
	}
}

// query returns the expected scores, sorted by worker.
func (m *model) query(local []uint64) []Score {
	var out []Score
	for w, t := range m.w {
		s := Score{Worker: w}
		blocks := map[string]bool{}
		for i := range t {
			for _, e := range t[i] {
				blocks[e.prefix] = true
			}
		}
		s.Indexed = int32(len(blocks))
		for d := 1; d <= len(local); d++ {
			mask := m.heldMask(w, key(local[:d]))
			if mask == 0 {
				break
			}
			s.Blocks = int32(d)
			s.Tiers[fastest(mask)]++
		}
		if s.Blocks > 0 {
			out = append(out, s)
		}
	}
	sortScores(out)
	return out
}

func sortScores(s []Score) {
	slices.SortFunc(s, func(a, b Score) int {
		if a.Worker.ID != b.Worker.ID {
			if a.Worker.ID < b.Worker.ID {
				return -1
			}
			return 1
		}
		return int(a.Worker.Rank) - int(b.Worker.Rank)
	})
}
