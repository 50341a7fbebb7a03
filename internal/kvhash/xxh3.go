package kvhash

import (
	"encoding/binary"
	"math/bits"
)

// This file is an XXH3-64 (seeded) written from the XXH3 specification
// (xxHash doc/xxhash_spec.md, "XXH3 64-bit"), so that the hot path of
// routing hashes block-sized inputs without the generic dispatch, the
// per-call derivation of the seeded secret for inputs over 240 bytes, and
// the copies a general-purpose library needs. Every length is covered; the
// tests compare it with github.com/zeebo/xxh3 on every length 0..2,100.
// The stripe accumulation of the long path is assembly on amd64 (AVX2 when
// the CPU has it, else SSE2; xxh3_amd64.s) and accumulateGeneric elsewhere
// or with -tags purego.

// XXH3 constants (specification, "Constants").
const (
	prime32_1 = 0x9E3779B1
	prime32_2 = 0x85EBCA77
	prime32_3 = 0xC2B2AE3D
	prime64_1 = 0x9E3779B185EBCA87
	prime64_2 = 0xC2B2AE3D27D4EB4F
	prime64_3 = 0x165667B19E3779F9
	prime64_4 = 0x85EBCA77C2B2AE63
	prime64_5 = 0x27D4EB2F165667C5

	stripeLen   = 64   // bytes consumed by one accumulate step
	secretLen   = 192  // default secret size
	blockStripe = 16   // stripes per block: (secretLen - stripeLen) / 8
	blockLen    = 1024 // stripeLen * blockStripe
)

// kSecret is the specification's default 192-byte secret.
var kSecret = [secretLen]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// secretAt reads the default secret's u64 at byte offset off.
func secretAt(off int) uint64 { return le64(kSecret[off:]) }

// keys is the key material of one seed, derived once so that hashing a
// block does no per-call set-up.
type keys struct {
	seed uint64
	// w is the seeded secret as words: word 2i is the default secret's
	// word 2i plus the seed, word 2i+1 its word 2i+1 minus the seed. It is
	// both the keys of the 16-byte mixes of inputs up to 128 bytes (which
	// read the secret at multiples of 16) and the custom secret of inputs
	// over 240 bytes.
	w [secretLen / 8]uint64
	// last is the custom secret's 8 words from byte 121 (the last stripe).
	last [8]uint64
	// merge is the custom secret's 8 words from byte 11 (merging the lanes).
	merge [8]uint64
}

// newKeys derives the key material for seed.
func newKeys(seed uint64) keys {
	k := keys{seed: seed}
	var custom [secretLen]byte
	for i := range k.w {
		v := secretAt(8 * i)
		if i%2 == 0 {
			v += seed
		} else {
			v -= seed
		}
		k.w[i] = v
		binary.LittleEndian.PutUint64(custom[8*i:], v)
	}
	for i := range 8 {
		k.last[i] = le64(custom[secretLen-stripeLen-7+8*i:])
		k.merge[i] = le64(custom[11+8*i:])
	}
	return k
}

// defaultKeys is the key material of Seed, used for the sequence-hash chain
// and for unsalted local hashes.
var defaultKeys = newKeys(Seed)

// keysFor returns the key material of seed, reusing defaultKeys for Seed.
func keysFor(seed uint64, scratch *keys) *keys {
	if seed == Seed {
		return &defaultKeys
	}
	*scratch = newKeys(seed)
	return scratch
}

// Chain-hash bit flips for seed 1337 (the 9..16-byte path's keys).
var (
	chainFlipLo = (secretAt(24) ^ secretAt(32)) + Seed
	chainFlipHi = (secretAt(40) ^ secretAt(48)) - Seed
)

func fold64(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// avalanche is XXH3's final mix.
func avalanche(h uint64) uint64 {
	h ^= h >> 37
	h *= 0x165667919E3779F9
	return h ^ h>>32
}

// avalanche64 is XXH64's final mix (used by the shortest inputs).
func avalanche64(h uint64) uint64 {
	h ^= h >> 33
	h *= prime64_2
	h ^= h >> 29
	h *= prime64_3
	return h ^ h>>32
}

// mix16 mixes 16 input bytes with two seeded secret words.
func mix16(b []byte, k0, k1 uint64) uint64 {
	return fold64(le64(b)^k0, le64(b[8:])^k1)
}

// hash16 is XXH3-64 of le64(lo) || le64(hi) with Seed: the chain step.
func hash16(lo, hi uint64) uint64 {
	lo ^= chainFlipLo
	hi ^= chainFlipHi
	return avalanche(16 + bits.ReverseBytes64(lo) + hi + fold64(lo, hi))
}

// hash64 is XXH3-64 of exactly 64 bytes (a 16-token block).
func (k *keys) hash64(b []byte) uint64 {
	b = b[:64:64]
	acc := uint64(len(b)) * prime64_1
	acc += fold64(le64(b[0:])^k.w[0], le64(b[8:])^k.w[1])
	acc += fold64(le64(b[48:])^k.w[2], le64(b[56:])^k.w[3])
	acc += fold64(le64(b[16:])^k.w[4], le64(b[24:])^k.w[5])
	acc += fold64(le64(b[32:])^k.w[6], le64(b[40:])^k.w[7])
	return avalanche(acc)
}

// hash returns XXH3-64 of b with the keys' seed.
func (k *keys) hash(b []byte) uint64 {
	n := len(b)
	switch {
	case n == 64:
		return k.hash64(b)
	case n == 256:
		return k.hash256(b)
	case n > 240:
		return k.hashLong(b)
	case n > 128:
		return k.hash129to240(b)
	case n > 16:
		return k.hash17to128(b)
	case n > 8:
		lo := le64(b) ^ ((secretAt(24) ^ secretAt(32)) + k.seed)
		hi := le64(b[n-8:]) ^ ((secretAt(40) ^ secretAt(48)) - k.seed)
		return avalanche(uint64(n) + bits.ReverseBytes64(lo) + hi + fold64(lo, hi))
	case n >= 4:
		seed := k.seed ^ uint64(bits.ReverseBytes32(uint32(k.seed)))<<32
		in := uint64(le32(b[n-4:])) + uint64(le32(b))<<32
		h := in ^ ((secretAt(8) ^ secretAt(16)) - seed)
		h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
		h *= 0x9FB21C651E98DF25
		h ^= (h >> 35) + uint64(n)
		h *= 0x9FB21C651E98DF25
		return h ^ h>>28
	case n > 0:
		c := uint32(b[0])<<16 | uint32(b[n>>1])<<24 | uint32(b[n-1]) | uint32(n)<<8
		flip := uint64(le32(kSecret[0:])^le32(kSecret[4:])) + k.seed
		return avalanche64(uint64(c) ^ flip)
	}
	return avalanche64(k.seed ^ secretAt(56) ^ secretAt(64))
}

func (k *keys) hash17to128(b []byte) uint64 {
	n := len(b)
	acc := uint64(n) * prime64_1
	if n > 32 {
		if n > 64 {
			if n > 96 {
				acc += mix16(b[48:], k.w[12], k.w[13])
				acc += mix16(b[n-64:], k.w[14], k.w[15])
			}
			acc += mix16(b[32:], k.w[8], k.w[9])
			acc += mix16(b[n-48:], k.w[10], k.w[11])
		}
		acc += mix16(b[16:], k.w[4], k.w[5])
		acc += mix16(b[n-32:], k.w[6], k.w[7])
	}
	acc += mix16(b, k.w[0], k.w[1])
	acc += mix16(b[n-16:], k.w[2], k.w[3])
	return avalanche(acc)
}

// mixSecret mixes 16 input bytes with the default secret at byte off,
// seeded (the 129..240-byte path reads the secret at odd offsets).
func (k *keys) mixSecret(b []byte, off int) uint64 {
	return mix16(b, secretAt(off)+k.seed, secretAt(off+8)-k.seed)
}

func (k *keys) hash129to240(b []byte) uint64 {
	n := len(b)
	acc := uint64(n) * prime64_1
	for i := range 8 {
		acc += mix16(b[16*i:], k.w[2*i], k.w[2*i+1])
	}
	acc = avalanche(acc)
	for i := 8; i < n/16; i++ {
		acc += k.mixSecret(b[16*i:], 16*(i-8)+3)
	}
	acc += k.mixSecret(b[n-16:], 136-17)
	return avalanche(acc)
}

// accumulateGeneric folds stripes 64-byte stripes of b into the eight
// lanes, stripe s keyed by the secret words from key[s]: lane i gains the
// product of the low and high halves of input word i xor key word i, and
// lane i^1 gains input word i itself. It is the portable version of
// accumulate (see the per-architecture files).
func accumulateGeneric(acc *[8]uint64, b []byte, key []uint64, stripes int) {
	a0, a1, a2, a3, a4, a5, a6, a7 := acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6], acc[7]
	for s := range stripes {
		in := b[s*stripeLen : (s+1)*stripeLen : (s+1)*stripeLen]
		k := (*[8]uint64)(key[s:])
		v0, v1, v2, v3 := le64(in[0:]), le64(in[8:]), le64(in[16:]), le64(in[24:])
		v4, v5, v6, v7 := le64(in[32:]), le64(in[40:]), le64(in[48:]), le64(in[56:])
		k0, k1, k2, k3 := v0^k[0], v1^k[1], v2^k[2], v3^k[3]
		k4, k5, k6, k7 := v4^k[4], v5^k[5], v6^k[6], v7^k[7]
		a0 += v1 + uint64(uint32(k0))*(k0>>32)
		a1 += v0 + uint64(uint32(k1))*(k1>>32)
		a2 += v3 + uint64(uint32(k2))*(k2>>32)
		a3 += v2 + uint64(uint32(k3))*(k3>>32)
		a4 += v5 + uint64(uint32(k4))*(k4>>32)
		a5 += v4 + uint64(uint32(k5))*(k5>>32)
		a6 += v7 + uint64(uint32(k6))*(k6>>32)
		a7 += v6 + uint64(uint32(k7))*(k7>>32)
	}
	*acc = [8]uint64{a0, a1, a2, a3, a4, a5, a6, a7}
}

// scramble mixes the lanes at the end of each full 1,024-byte block.
func scramble(acc *[8]uint64, key *[8]uint64) {
	for i := range acc {
		a := acc[i]
		acc[i] = (a ^ a>>47 ^ key[i]) * prime32_1
	}
}

// hash256 is hashLong for exactly 256 bytes (a 64-token block): three
// stripes and the last one, no full 1,024-byte block to scramble.
func (k *keys) hash256(b []byte) uint64 {
	b = b[:256:256]
	acc := [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	accumulate(&acc, b, k.w[:], 3)
	accumulate(&acc, b[256-stripeLen:], k.last[:], 1)
	m := &k.merge
	h := uint64(len(b)) * prime64_1
	h += fold64(acc[0]^m[0], acc[1]^m[1])
	h += fold64(acc[2]^m[2], acc[3]^m[3])
	h += fold64(acc[4]^m[4], acc[5]^m[5])
	h += fold64(acc[6]^m[6], acc[7]^m[7])
	return avalanche(h)
}

// hashLong is XXH3-64 of more than 240 bytes with the keys' custom secret.
func (k *keys) hashLong(b []byte) uint64 {
	n := len(b)
	acc := [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	blocks := (n - 1) / blockLen
	for blk := range blocks {
		accumulate(&acc, b[blk*blockLen:], k.w[:], blockStripe)
		scramble(&acc, (*[8]uint64)(k.w[blockStripe:]))
	}
	accumulate(&acc, b[blocks*blockLen:], k.w[:], ((n-1)-blocks*blockLen)/stripeLen)
	accumulate(&acc, b[n-stripeLen:], k.last[:], 1)
	m := &k.merge
	h := uint64(n) * prime64_1
	h += fold64(acc[0]^m[0], acc[1]^m[1])
	h += fold64(acc[2]^m[2], acc[3]^m[3])
	h += fold64(acc[4]^m[4], acc[5]^m[5])
	h += fold64(acc[6]^m[6], acc[7]^m[7])
	return avalanche(h)
}
