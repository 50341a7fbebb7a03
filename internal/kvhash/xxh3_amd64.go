//go:build amd64 && !purego

package kvhash

// accumSSE2 is accumulateGeneric in SSE2 assembly (part of the amd64
// baseline, so no feature check): two lanes per instruction, the 32×32-bit
// products with PMULUDQ. b must hold 64·stripes bytes and key stripes+7
// words; stripes must be positive.
//
//go:noescape
func accumSSE2(acc *[8]uint64, b *byte, key *uint64, stripes int)

// accumAVX2 is accumSSE2 with four lanes per instruction; call it only when
// useAVX2 is true.
//
//go:noescape
func accumAVX2(acc *[8]uint64, b *byte, key *uint64, stripes int)

// cpuid executes CPUID with the leaf in EAX and the sub-leaf in ECX.
func cpuid(leaf, sub uint32) (a, b, c, d uint32)

// xgetbv0 reads the extended control register 0 (which register states
// the operating system saves).
func xgetbv0() (a, d uint32)

// useAVX2 says whether the CPU has AVX2 and the OS saves the YMM registers.
var useAVX2 = detectAVX2()

func detectAVX2() bool {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	const osxsave, avx = 1 << 27, 1 << 28
	if _, _, c, _ := cpuid(1, 0); c&osxsave == 0 || c&avx == 0 {
		return false
	}
	if a, _ := xgetbv0(); a&6 != 6 { // XMM and YMM state
		return false
	}
	_, b, _, _ := cpuid(7, 0)
	return b&(1<<5) != 0
}

// accumulate folds stripes 64-byte stripes of b into acc (see
// accumulateGeneric).
func accumulate(acc *[8]uint64, b []byte, key []uint64, stripes int) {
	if stripes <= 0 {
		return
	}
	_ = b[stripeLen*stripes-1]
	_ = key[stripes+6]
	if useAVX2 {
		accumAVX2(acc, &b[0], &key[0], stripes)
		return
	}
	accumSSE2(acc, &b[0], &key[0], stripes)
}
