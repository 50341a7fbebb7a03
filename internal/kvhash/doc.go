// Package kvhash turns token ids into KV-cache block hashes that are bit for
// bit compatible with NVIDIA Dynamo's router.
//
// A prompt is cut into full blocks of BlockSize tokens (a trailing partial
// block is never hashed). Each block gets two hashes:
//
//   - the local hash: XXH3-64 over the block's token ids written as u32
//     little-endian (followed, for multimodal blocks, by the block's
//     multimodal hashes sorted ascending as u64 little-endian), with a seed
//     of 1337 salted by the LoRA name and the cache namespace;
//   - the sequence hash: seq[0] = local[0] and
//     seq[i] = XXH3-64(le64(seq[i-1]) || le64(local[i]), seed 1337), so two
//     equal sequence hashes mean two equal prefixes.
//
// The index walks its tree by local hash; the sequence hash identifies a whole
// prefix and is what the active-sequence ledger and approximate mode use.
//
// Hashing is on every routing decision's path (a 16 k-token prompt is 1,024
// blocks at block size 16), so the package carries its own XXH3-64 written
// from the specification (xxh3.go): the seeded key material is derived once
// per seed instead of per block, the 64-byte block (16 tokens) and the
// 16-byte chain input have straight-line code, the long path's stripe
// accumulation is AVX2 or SSE2 assembly on amd64 (portable Go elsewhere or
// with -tags purego), and token ids are read in place as little-endian
// bytes on little-endian machines. Local and sequence hashes are computed in one
// pass so the serial chain overlaps the next block's local hash. The tests
// pin it to github.com/zeebo/xxh3 on every input length 0..2,100 and to the
// naive per-block route.
//
// The package is pure: no I/O, no goroutines, no clock. Hashing a request
// allocates nothing beyond the output slices the caller may pass in (on
// big-endian machines, also one copy of the tokens).
package kvhash
