package kvhash

import (
	"encoding/binary"
	"errors"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3-64 seed Dynamo uses for local block hashes (before
// salting) and, always, for the sequence-hash chain.
const Seed uint64 = 1337

// ErrBlockSize reports a block size that is zero or negative.
var ErrBlockSize = errors.New("kvhash: block size must be positive")

// SaltedSeed returns the local-hash seed for a LoRA adapter name and a cache
// namespace: 1337 + XXH3-64(lora, seed 0) + XXH3-64(namespace, seed 1), with
// wrapping addition. An empty string counts as absent, so SaltedSeed("", "")
// is Seed.
func SaltedSeed(loraName, namespace string) uint64 {
	s := Seed
	if loraName != "" {
		s += xxh3.HashStringSeed(loraName, 0)
	}
	if namespace != "" {
		s += xxh3.HashStringSeed(namespace, 1)
	}
	return s
}

// littleEndian is true on little-endian machines, where a []uint32 already
// has the byte layout the hash wants and can be hashed in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// tokenBytes views tokens as their u32 little-endian bytes. On little-endian
// machines this is the memory of tokens itself; elsewhere the bytes are
// written into buf (grown if needed) and the possibly grown buf is returned.
func tokenBytes(tokens []uint32, buf []byte) (view, newBuf []byte) {
	if len(tokens) == 0 {
		return nil, buf
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens)), buf
	}
	buf = slices.Grow(buf[:0], 4*len(tokens))[:4*len(tokens)]
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return buf, buf
}

// LocalHash returns the local hash of one block of token ids with the given
// seed (Seed, or SaltedSeed for LoRA / namespace).
func LocalHash(tokens []uint32, seed uint64) uint64 {
	b, _ := tokenBytes(tokens, nil)
	if seed == Seed {
		return defaultKeys.hash(b)
	}
	// A salted seed would need its key material derived for one hash;
	// the library does the same work without keeping it.
	return xxh3.HashSeed(b, seed)
}

// LocalHashMM returns the local hash of one block that carries multimodal
// content: the token bytes followed by mmHashes sorted ascending, each as u64
// little-endian. mmHashes is not modified. With no multimodal hashes it equals
// LocalHash.
func LocalHashMM(tokens []uint32, mmHashes []uint64, seed uint64) uint64 {
	if len(mmHashes) == 0 {
		return LocalHash(tokens, seed)
	}
	var ks keys
	return localHashMM(tokens, mmHashes, keysFor(seed, &ks))
}

func localHashMM(tokens []uint32, mmHashes []uint64, k *keys) uint64 {
	buf := make([]byte, 0, 4*len(tokens)+8*len(mmHashes))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	sorted := slices.Clone(mmHashes)
	slices.Sort(sorted)
	for _, h := range sorted {
		buf = binary.LittleEndian.AppendUint64(buf, h)
	}
	return k.hash(buf)
}

// ChainHash returns the sequence hash of a block from its parent's sequence
// hash and its own local hash: XXH3-64(le64(parent) || le64(local), 1337).
func ChainHash(parent, local uint64) uint64 { return hash16(parent, local) }

// Options describes how a request's tokens are cut and salted.
type Options struct {
	// BlockSize is the number of tokens per KV block (the engine's block
	// size); it must be positive.
	BlockSize int
	// LoRAName is the LoRA adapter the request uses; empty means none.
	LoRAName string
	// Namespace is the cache namespace (salt); empty means none.
	Namespace string
	// MM holds, per block index, the multimodal hashes of content placed in
	// that block; nil or a short slice means no multimodal content.
	MM [][]uint64
}

// NumBlocks returns how many full blocks n tokens make.
func NumBlocks(n, blockSize int) int {
	if blockSize <= 0 || n <= 0 {
		return 0
	}
	return n / blockSize
}

// Hashes computes the local and sequence hashes of every full block of
// tokens, appending them to local[:0] and seq[:0] (pass nil to allocate, or
// reuse the slices of a previous call to allocate nothing). The partial last
// block is not hashed.
//
// Both hashes are computed in one pass: the chain step of block i (which
// waits for block i-1's) overlaps with the local hash of block i+1.
func Hashes(tokens []uint32, o Options, local, seq []uint64) ([]uint64, []uint64, error) {
	if o.BlockSize <= 0 {
		return local[:0], seq[:0], ErrBlockSize
	}
	n := NumBlocks(len(tokens), o.BlockSize)
	local = slices.Grow(local[:0], n)[:n]
	seq = slices.Grow(seq[:0], n)[:n]
	var ks keys
	k := keysFor(SaltedSeed(o.LoRAName, o.Namespace), &ks)
	hashBlocks(tokens[:n*o.BlockSize], o.BlockSize, o.MM, k, local, seq)
	return local, seq, nil
}

// LocalHashes computes the local hash of every full block of tokens,
// appending to local[:0]; the index query walks by these alone.
func LocalHashes(tokens []uint32, o Options, local []uint64) ([]uint64, error) {
	if o.BlockSize <= 0 {
		return local[:0], ErrBlockSize
	}
	n := NumBlocks(len(tokens), o.BlockSize)
	local = slices.Grow(local[:0], n)[:n]
	var ks keys
	k := keysFor(SaltedSeed(o.LoRAName, o.Namespace), &ks)
	hashBlocks(tokens[:n*o.BlockSize], o.BlockSize, o.MM, k, local, nil)
	return local, nil
}

// hashBlocks writes the local hash of each of the len(local) blocks of bs
// tokens to local and, when seq is not nil, the sequence hashes to seq.
func hashBlocks(tokens []uint32, bs int, mm [][]uint64, k *keys, local, seq []uint64) {
	if len(local) == 0 {
		return
	}
	view, _ := tokenBytes(tokens, nil)
	bb := 4 * bs
	if len(mm) == 0 && bb == 64 && seq != nil {
		// The common case (16-token blocks), without the dispatch.
		seq = seq[:len(local)]
		w := (*[8]uint64)(k.w[:8])
		prev := k.hash64(view)
		local[0], seq[0] = prev, prev
		for i := 1; i < len(local); i++ {
			// hash64, inlined by hand (too big for the compiler).
			b := view[64*i : 64*i+64 : 64*i+64]
			acc := uint64(len(b)) * prime64_1
			acc += fold64(le64(b[0:])^w[0], le64(b[8:])^w[1])
			acc += fold64(le64(b[48:])^w[2], le64(b[56:])^w[3])
			acc += fold64(le64(b[16:])^w[4], le64(b[24:])^w[5])
			acc += fold64(le64(b[32:])^w[6], le64(b[40:])^w[7])
			l := avalanche(acc)
			local[i] = l
			prev = hash16(prev, l)
			seq[i] = prev
		}
		return
	}
	if len(mm) == 0 && bb == 256 && seq != nil {
		// 64-token blocks, without the dispatch.
		seq = seq[:len(local)]
		prev := k.hash256(view)
		local[0], seq[0] = prev, prev
		for i := 1; i < len(local); i++ {
			l := k.hash256(view[256*i:])
			local[i] = l
			prev = hash16(prev, l)
			seq[i] = prev
		}
		return
	}
	for i := range local {
		if i < len(mm) && len(mm[i]) > 0 {
			local[i] = localHashMM(tokens[i*bs:(i+1)*bs], mm[i], k)
		} else {
			local[i] = k.hash(view[i*bb : (i+1)*bb])
		}
	}
	if seq != nil {
		chain(local, seq[:len(local)])
	}
}

// chain writes the sequence hashes of local to seq (same length).
func chain(local, seq []uint64) {
	if len(local) == 0 {
		return
	}
	prev := local[0]
	seq[0] = prev
	for i := 1; i < len(local); i++ {
		prev = hash16(prev, local[i])
		seq[i] = prev
	}
}

// SequenceHashes chains already computed local hashes into sequence hashes,
// appending to seq[:0].
func SequenceHashes(local []uint64, seq []uint64) []uint64 {
	seq = slices.Grow(seq[:0], len(local))[:len(local)]
	chain(local, seq)
	return seq
}
