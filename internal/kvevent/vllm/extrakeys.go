package vllm

import (
	"strconv"

	"github.com/zeebo/xxh3"
)

// vLLM's extra keys per block are, in order: the LoRA name, multimodal
// items ((identifier, offset) pairs, or bare identifiers in older
// versions), the cache salt (first block of a sequence only) and a
// prompt-embeds digest. The router folds them the way its own request side
// hashes: the LoRA name and the salt go into the local-hash seed
// (kvhash.SaltedSeed), multimodal identifiers are appended to the block's
// bytes as u64 values (kvhash.LocalHashMM), and a prompt-embeds digest is
// appended the same way, as XXH3-64 of its bytes.

// mmHash maps a multimodal identifier to the u64 the router hashes, as
// Dynamo does: a 64-hex-digit digest gives its first 16 hex digits, any
// other string its XXH3-64 with seed 0.
func mmHash(id string) uint64 {
	if isHex64(id) {
		v, err := strconv.ParseUint(id[:16], 16, 64)
		if err == nil {
			return v
		}
	}
	return xxh3.HashStringSeed(id, 0)
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// saltOf returns the cache salt of a sequence's first block: its first
// string item that is neither the LoRA name nor a multimodal digest.
func saltOf(key ExtraKey, lora string) string {
	for _, it := range key {
		if s, ok := it.(string); ok && s != "" && (lora == "" || s != lora) && !isHex64(s) {
			return s
		}
	}
	return ""
}

// mmHashes returns the values a block's extra key appends to its bytes.
// On the first block of a sequence a plain string is the salt (handled by
// saltOf), elsewhere a bare multimodal identifier. An empty identifier,
// bare or in an MMItem, names no content and is skipped.
func mmHashes(key ExtraKey, lora string, first bool) []uint64 {
	var out []uint64
	for _, it := range key {
		switch v := it.(type) {
		case MMItem:
			if v.Identifier == "" {
				continue // names no content, as a bare empty string
			}
			out = append(out, mmHash(v.Identifier))
		case string:
			if v == "" || (lora != "" && v == lora) {
				continue
			}
			if first && !isHex64(v) {
				continue // the cache salt
			}
			out = append(out, mmHash(v))
		case []byte:
			out = append(out, xxh3.HashSeed(v, 0))
		}
	}
	return out
}
