package sequences

import (
	"testing"

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
