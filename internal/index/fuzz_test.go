package index

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// FuzzApply feeds arbitrary events from worker 9 into an index that also
// holds a fixed chain of worker 1: nothing may panic and worker 1's answers
// must not change.
func FuzzApply(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 0, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := mustNew(t, DefaultConfig())
		ref := []uint64{1, 2, 3}
		_ = apply(t, x, chain(w1, 0, 100, ref...))
		var before Scores
		x.Query(ref, &before)
		want := before.Get(w1)
		for len(data) >= 3 {
			ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: 9, Rank: kvevent.DPRank(data[1] % 3)},
				Kind: kvevent.Kind(data[0] % 5), Tier: kvevent.Tier(data[2] % 6)}
			data = data[3:]
			if len(data) >= 9 {
				ev.HasParent = data[0]&1 == 1
				ev.Parent = binary.LittleEndian.Uint64(data[1:9]) % 8
				data = data[9:]
			}
			for len(data) >= 2 && data[0] != 0xff {
				e, l := uint64(data[0]%16), uint64(data[1]%4)
				data = data[2:]
				if ev.Kind == kvevent.Removed {
					ev.Removed = append(ev.Removed, e)
				} else {
					ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: e, LocalHash: l})
				}
			}
			if len(data) > 0 {
				data = data[1:]
			}
			_ = x.Apply(&ev)
			var s Scores
			x.Query(ref, &s)
			if diff := cmp.Diff(want, s.Get(w1)); diff != "" {
				t.Fatalf("worker 1 changed after %+v:\n%s", ev, diff)
			}
		}
		x.RemoveWorker(9)
		if st := x.Stats(); st.Entries != 3 || st.Nodes != 3 {
			t.Fatalf("after RemoveWorker(9): %+v", st)
		}
	})
}
