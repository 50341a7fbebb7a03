//go:build amd64 && !purego

package kvhash

// accumSSE2 is accumulateGeneric in SSE2 assembly (part of the amd64
// baseline, so no feature check): two lanes per instruction, the 32×32-bit
// products with PMULUDQ. b must hold 64·stripes bytes and key stripes+7
// words; stripes must be positive.
//
//go:noescape
func accumSSE2(acc *[8]uint64, b *byte, key *uint64, stripes int)

// accumulate folds stripes 64-byte stripes of b into acc (see
// accumulateGeneric).
func accumulate(acc *[8]uint64, b []byte, key []uint64, stripes int) {
	if stripes <= 0 {
		return
	}
	_ = b[stripeLen*stripes-1]
	_ = key[stripes+6]
	accumSSE2(acc, &b[0], &key[0], stripes)
}
