package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"sync"
	"testing"

	qwen3files "github.com/kvrouter/kvrouter/internal/modelfiles/qwen3"
)

type golden struct {
	Text string   `json:"text"`
	IDs  []uint32 `json:"ids"`
}

// readGoldens loads testdata/qwen3_golden.jsonl, written by tools/tokgold
// with the pinned HuggingFace reference (@huggingface/tokenizers 0.2.0).
func readGoldens(t testing.TB) []golden {
	t.Helper()
	f, err := os.Open("testdata/qwen3_golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []golden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g golden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 200 {
		t.Fatalf("only %d goldens, want >= 200", len(out))
	}
	return out
}

func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestQwen3Goldens compares every golden exactly, twice with the default
// caches (the second pass runs from them), then with every cache disabled.
func TestQwen3Goldens(t *testing.T) {
	gs := readGoldens(t)
	for pass, tok := range []*Tokenizer{qwen3(t), qwen3(t), qwen3Uncached(t)} {
		bad := 0
		for _, g := range gs {
			got := tok.Encode(g.Text, false)
			if !slices.Equal(got, g.IDs) {
				bad++
				if bad <= 10 {
					t.Errorf("pass %d: Encode(%q)\n got %v\nwant %v", pass, trunc(g.Text), truncIDs(got), truncIDs(g.IDs))
				}
			}
		}
		if bad > 0 {
			t.Fatalf("pass %d: %d of %d goldens differ", pass, bad, len(gs))
		}
	}
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func truncIDs(ids []uint32) []uint32 {
	if len(ids) > 40 {
		return ids[:40]
	}
	return ids
}

var (
	uncachedOnce sync.Once
	uncachedTok  *Tokenizer
	uncachedErr  error
)

// qwen3Uncached returns a Qwen3 tokenizer with every cache disabled, loaded
// once per test binary.
func qwen3Uncached(t testing.TB) *Tokenizer {
	t.Helper()
	uncachedOnce.Do(func() {
		raw, err := qwen3files.TokenizerJSON()
		if err != nil {
			uncachedErr = err
			return
		}
		uncachedTok, uncachedErr = LoadJSONConfig(raw, Config{})
	})
	if uncachedErr != nil {
		t.Fatal(uncachedErr)
	}
	return uncachedTok
}
