// Package qwen3 embeds the default model's tokenizer files (Qwen3), as data
// and nothing else, so that both the tokenizer package (its Default) and
// the model loader in the parent package can use them without importing
// each other. Provenance and licence are in PROVENANCE.md and LICENSE
// beside this file.
package qwen3

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
)

//go:embed tokenizer.json.gz
var tokenizerGz []byte

//go:embed tokenizer_config.json
var tokenizerConfig []byte

// Name is the name the embedded model is served under.
const Name = "Qwen/Qwen3-0.6B"

// TokenizerJSON returns the embedded tokenizer.json, decompressed (about
// 11 MB; each call decompresses anew, so callers should keep the parsed
// tokenizer rather than call this per request).
func TokenizerJSON() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tokenizerGz))
	if err != nil {
		return nil, fmt.Errorf("opening embedded tokenizer.json.gz: %w", err)
	}
	defer zr.Close()
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("decompressing embedded tokenizer.json.gz: %w", err)
	}
	return b, nil
}

// TokenizerConfig returns the embedded tokenizer_config.json, which holds
// the chat template. The slice is shared: do not modify it.
func TokenizerConfig() []byte { return tokenizerConfig }
