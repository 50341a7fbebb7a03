// Package modelfiles embeds the default model's tokenizer and chat template
// (Qwen3) so that kvrouter runs with nothing outside its binary. Provenance
// and licence are beside the files in qwen3/.
package modelfiles

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
)

//go:embed qwen3/tokenizer.json.gz
var qwen3TokenizerGz []byte

//go:embed qwen3/tokenizer_config.json
var qwen3TokenizerConfig []byte

// DefaultModel is the name the embedded model is served under.
const DefaultModel = "Qwen/Qwen3-0.6B"

// Qwen3TokenizerJSON returns the embedded Qwen3 tokenizer.json, decompressed
// (about 11 MB; each call decompresses anew, so callers should keep the
// parsed tokenizer rather than call this per request).
func Qwen3TokenizerJSON() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(qwen3TokenizerGz))
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

// Qwen3TokenizerConfig returns the embedded Qwen3 tokenizer_config.json,
// which holds the chat template. The slice is shared: do not modify it.
func Qwen3TokenizerConfig() []byte { return qwen3TokenizerConfig }
