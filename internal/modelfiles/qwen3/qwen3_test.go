package qwen3

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// The embedded files must be byte-identical to the originals recorded in
// PROVENANCE.md.
func TestEmbeddedFilesMatchProvenance(t *testing.T) {
	tj, err := TokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tj)
	if got := hex.EncodeToString(sum[:]); got != "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4" {
		t.Fatalf("tokenizer.json sha256 %s", got)
	}
	sum = sha256.Sum256(TokenizerConfig())
	if got := hex.EncodeToString(sum[:]); got != "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63" {
		t.Fatalf("tokenizer_config.json sha256 %s", got)
	}
}
