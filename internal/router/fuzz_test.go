package router

import (
	"encoding/binary"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
)

// FuzzRoute feeds arbitrary requests and lifecycle calls to a router: no
// input may panic, and after freeing everything the load is zero.
func FuzzRoute(f *testing.F) {
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10"), uint8(3), -1.0)
	f.Add([]byte{}, uint8(0), 0.5)
	f.Fuzz(func(t *testing.T, data []byte, ops uint8, knob float64) {
		cfg := DefaultConfig()
		cfg.BlockSize = 4
		r, err := New(cfg, serialIndex(t), fixedClock, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			_ = r.AddWorker(WorkerInfo{ID: kvevent.WorkerID(i), BlockSize: 4, DPSize: int(ops % 3), KVCapacityBlocks: int(ops), MaxBatchedTokens: int(knob)})
		}
		var toks []uint32
		for len(data) >= 2 {
			toks = append(toks, uint32(binary.LittleEndian.Uint16(data)%64))
			data = data[2:]
		}
		ids := []string{"a", "b", "c"}
		for i := range int(ops%16) + 1 {
			id := ids[i%3]
			req := Request{ID: id, Tokens: toks[:len(toks)*(i%4)/3], ExpectedOutputTokens: int(ops) - 100,
				Overrides: scheduler.Overrides{Temperature: &knob, OverlapScoreCredit: &knob},
				Reuse:     sequences.Reuse(i % 4), DPRankStart: int(ops) % 3, DPRankSize: i % 2,
				HasPinned: i%5 == 4, PinnedWorker: kvevent.WorkerID(i % 4)}
			if d, err := r.Route(req); err == nil && (d.Chosen < 0 || d.Chosen >= len(d.Candidates)) {
				t.Fatalf("chosen index %d out of range", d.Chosen)
			}
			_ = r.SetGenerated(id, int(knob))
			if i%2 == 1 {
				r.MarkPrefillCompleted(id)
			}
			if i%3 == 2 {
				r.Free(id)
			}
			_ = r.ApplyRemote(LifecycleEvent{Kind: LifecycleKind(i % 5), RouterID: uint64(i), RequestID: id, Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(i % 4)}, BlockHashes: []uint64{uint64(i)}})
		}
		for _, id := range ids {
			r.Free(id)
		}
		for _, l := range r.Loads() {
			if l.ActiveRequests != 0 || l.ActivePrefillTokens != 0 || l.ActiveBlocks != 0 {
				t.Fatalf("load after freeing all: %+v", l)
			}
		}
	})
}
