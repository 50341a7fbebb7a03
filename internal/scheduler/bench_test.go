package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// BenchmarkSelectInto is the scheduler's share of a Route: one decision
// over N candidates (the kv policy at temperature 0, every candidate
// eligible, a quarter of them holding a 64-block prefix), written into
// the previous decision's rows as the router does.
func BenchmarkSelectInto(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("candidates=%d", n), func(b *testing.B) {
			s, err := New(DefaultConfig(), KV{})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			cands := make([]Candidate, n)
			for i := range cands {
				cands[i] = Candidate{
					Worker:              kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1)},
					ActivePrefillTokens: rng.IntN(4) * 4096,
					ActiveBlocks:        float64(1000 + rng.IntN(500)),
					DecodeBlocks:        float64(1256 + rng.IntN(500)),
					ActiveRequests:      4,
					KVCapacityBlocks:    16384,
				}
				if i%4 == 0 {
					cands[i].Overlap.Device = 64
				}
			}
			req := Request{InputTokens: 16384, BlockSize: 64}
			var rows []Explanation
			b.ReportAllocs()
			for b.Loop() {
				d, err := s.SelectInto(rows, req, cands, rng)
				if err != nil {
					b.Fatal(err)
				}
				rows = d.Candidates
			}
		})
	}
}
