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
// prefix and is what the active-sequence tracker and approximate mode use.
//
// The package is pure: no I/O, no goroutines, no clock. Hashing a request
// allocates nothing beyond the output slices the caller may pass in.
package kvhash
