package sequences

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"pgregory.net/rapid"
)

// TestSeqLCPMatchesLCP checks the logarithmic common prefix of two runs of
// sequence hashes against the element-by-element one, on runs that share
// a random prefix of local hashes and then diverge, compared at random
// offsets of their chains.
func TestSeqLCPMatchesLCP(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		shared := rapid.SliceOfN(rapid.Uint64Range(0, 3), 0, 40).Draw(rt, "shared")
		ta := rapid.SliceOfN(rapid.Uint64Range(0, 3), 0, 40).Draw(rt, "tailA")
		tb := rapid.SliceOfN(rapid.Uint64Range(0, 3), 0, 40).Draw(rt, "tailB")
		a := kvhash.SequenceHashes(append(append([]uint64{}, shared...), ta...), nil)
		b := kvhash.SequenceHashes(append(append([]uint64{}, shared...), tb...), nil)
		off := rapid.IntRange(0, len(shared)).Draw(rt, "offset")
		if got, want := seqLCP(a[off:], b[off:]), lcp(a[off:], b[off:]); got != want {
			rt.Fatalf("seqLCP = %d, lcp = %d", got, want)
		}
	})
}

// TestSeqLCPArbitraryRuns checks that runs without the sequence-hash
// property still get a length within bounds whose positions match.
func TestSeqLCPArbitraryRuns(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a := rapid.SliceOfN(rapid.Uint64Range(0, 2), 0, 20).Draw(rt, "a")
		b := rapid.SliceOfN(rapid.Uint64Range(0, 2), 0, 20).Draw(rt, "b")
		m := seqLCP(a, b)
		if m < 0 || m > min(len(a), len(b)) {
			rt.Fatalf("seqLCP = %d out of range", m)
		}
		if m > 0 && (a[0] != b[0] || a[m-1] != b[m-1]) {
			rt.Fatalf("seqLCP = %d but the runs differ at its ends", m)
		}
	})
}

// TestBookingReusesHashCopies checks that a booking after a Free reuses
// the freed request's copy of its hashes (the pool), and that the reused
// copy holds the new request's hashes, not the old ones.
func TestBookingReusesHashCopies(t *testing.T) {
	tr, _ := New(DefaultConfig())
	w := kvevent.WorkerRank{ID: 1}
	tr.AddRank(w)
	a := chain(1, 2, 3, 4, 5, 6, 7, 8)
	b := chain(9, 10, 11, 12, 13, 14, 15, 16)
	must(t, tr.AddRequest(Request{ID: "a", Worker: w, BlockHashes: a}, t0))
	tr.Free("a")
	allocs := testing.AllocsPerRun(20, func() {
		_ = tr.AddRequest(Request{ID: "b", Worker: w, BlockHashes: b}, t0)
		tr.Free("b")
	})
	// The request record, its trie node and the first-hash index entry
	// remain; the hash copy must not.
	if allocs > 3 {
		t.Fatalf("%v allocations per booking", allocs)
	}
	must(t, tr.AddRequest(Request{ID: "b", Worker: w, BlockHashes: b}, t0))
	loads := tr.Potential(a, ReuseDefault, nil)
	if loads[0].NewBlocks != 8 || loads[0].ActiveBlocks != 8 {
		t.Fatalf("after reuse: potential for a = %+v, want 8 new of 8 active", loads[0])
	}
	loads = tr.Potential(b, ReuseDefault, nil)
	if loads[0].NewBlocks != 0 {
		t.Fatalf("after reuse: potential for b = %+v, want 0 new", loads[0])
	}
}
