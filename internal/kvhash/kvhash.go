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
	buf := make([]byte, 0, 4*len(tokens)+8*len(mmHashes))
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	sorted := slices.Clone(mmHashes)
	slices.Sort(sorted)
	for _, h := range sorted {
		buf = binary.LittleEndian.AppendUint64(buf, h)
	}
	return xxh3.HashSeed(buf, seed)
}

// ChainHash returns the sequence hash of a block from its parent's sequence
// hash and its own local hash: XXH3-64(le64(parent) || le64(local), 1337).
func ChainHash(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

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
func Hashes(tokens []uint32, o Options, local, seq []uint64) ([]uint64, []uint64, error) {
	local, err := LocalHashes(tokens, o, local)
	if err != nil {
		return local, seq[:0], err
	}
	return local, SequenceHashes(local, seq), nil
}

// LocalHashes computes the local hash of every full block of tokens,
// appending to local[:0]; the index query walks by these alone.
func LocalHashes(tokens []uint32, o Options, local []uint64) ([]uint64, error) {
	if o.BlockSize <= 0 {
		return local[:0], ErrBlockSize
	}
	n := NumBlocks(len(tokens), o.BlockSize)
	local = slices.Grow(local[:0], n)[:n]
	seed := SaltedSeed(o.LoRAName, o.Namespace)
	var buf []byte
	for i := range n {
		blk := tokens[i*o.BlockSize : (i+1)*o.BlockSize]
		if i < len(o.MM) && len(o.MM[i]) > 0 {
			local[i] = LocalHashMM(blk, o.MM[i], seed)
			continue
		}
		var b []byte
		b, buf = tokenBytes(blk, buf)
		local[i] = xxh3.HashSeed(b, seed)
	}
	return local, nil
}

// SequenceHashes chains already computed local hashes into sequence hashes,
// appending to seq[:0].
func SequenceHashes(local []uint64, seq []uint64) []uint64 {
	seq = slices.Grow(seq[:0], len(local))[:len(local)]
	for i, l := range local {
		if i == 0 {
			seq[0] = l
		} else {
			seq[i] = ChainHash(seq[i-1], l)
		}
	}
	return seq
}
