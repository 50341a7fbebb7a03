package sequences

import (
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// BenchmarkBookAndFree measures Potential + AddRequest + Free of a
// 1,024-block request (a 16 k-token prompt at block size 16) whose first
// 256 blocks are a system prompt shared with running requests, on a
// ledger with 64 workers each running 4 requests.
func BenchmarkBookAndFree(b *testing.B) {
	tr, reqs := benchLedger(b)
	var loads []Load
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h := reqs[i%len(reqs)]
		loads = tr.Potential(h, ReuseDefault, loads)
		w := loads[i%len(loads)].Worker
		_ = tr.AddRequest(Request{ID: "x", Worker: w, BlockHashes: h, PrefillTokens: 10}, t0)
		tr.Free("x")
	}
}

// BenchmarkPotential measures Potential alone on the ledger of
// BenchmarkBookAndFree.
func BenchmarkPotential(b *testing.B) {
	tr, reqs := benchLedger(b)
	var loads []Load
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		loads = tr.Potential(reqs[i%len(reqs)], ReuseDefault, loads)
	}
}

func benchLedger(b *testing.B) (*Ledger, [][]uint64) {
	tr, _ := New(DefaultConfig())
	prompt := func(fam, id int) []uint64 {
		locals := make([]uint64, 1024)
		for i := range locals {
			locals[i] = uint64(fam*1_000_000 + i)
			if i >= 256 {
				locals[i] += uint64(id) << 32
			}
		}
		return kvhash.SequenceHashes(locals, nil)
	}
	for w := range 64 {
		wk := kvevent.WorkerRank{ID: kvevent.WorkerID(w)}
		tr.AddRank(wk)
		for k := range 4 {
			if err := tr.AddRequest(Request{ID: fmt.Sprint(w, "-", k), Worker: wk, BlockHashes: prompt(w%8, w*4+k+1), PrefillTokens: 100}, t0); err != nil {
				b.Fatal(err)
			}
		}
	}
	reqs := make([][]uint64, 16)
	for i := range reqs {
		reqs[i] = prompt(i%8, 10_000+i)
	}
	return tr, reqs
}
