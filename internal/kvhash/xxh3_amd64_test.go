//go:build amd64 && !purego

package kvhash

import (
	"math/rand/v2"
	"testing"
)

// TestAccumAssembly checks each assembly accumulation (SSE2 always, AVX2
// when the machine has it) against the portable one, whatever accumulate
// dispatches to.
func TestAccumAssembly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	b := make([]byte, blockStripe*stripeLen)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	k := newKeys(rng.Uint64())
	variants := map[string]func(*[8]uint64, *byte, *uint64, int){"SSE2": accumSSE2}
	if useAVX2 {
		variants["AVX2"] = accumAVX2
	} else {
		t.Log("no AVX2 here: only SSE2 checked")
	}
	for name, accum := range variants {
		for stripes := 1; stripes <= blockStripe; stripes++ {
			var got, want [8]uint64
			for i := range got {
				got[i] = rng.Uint64()
				want[i] = got[i]
			}
			accum(&got, &b[0], &k.w[0], stripes)
			accumulateGeneric(&want, b, k.w[:], stripes)
			if got != want {
				t.Fatalf("%s, %d stripes: %x, generic %x", name, stripes, got, want)
			}
		}
	}
}

func BenchmarkHash256BytesSSE2(b *testing.B) {
	if !useAVX2 {
		b.Skip("SSE2 is already the default here")
	}
	useAVX2 = false
	defer func() { useAVX2 = true }()
	buf := make([]byte, 256)
	var h uint64
	for b.Loop() {
		h += defaultKeys.hash(buf)
	}
	_ = h
}
