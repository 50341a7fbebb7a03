package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"slices"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// familyGolden is one line of testdata/<family>_golden.jsonl, written by
// tools/tokgold/families.mjs with @huggingface/tokenizers 0.2.0 (and
// checked against HuggingFace's Rust tokenizers 0.23.2).
type familyGolden struct {
	Text    string   `json:"text"`
	Special bool     `json:"special"`
	IDs     []uint32 `json:"ids"`
	// Decoded is the Rust tokenizers' decode of IDs, special tokens kept.
	Decoded string `json:"decoded"`
}

// families are the model families whose tokenizer files are kept in
// internal/modelfiles/testdata.
var families = []string{"llama3.1", "deepseek-v3", "gemma3", "llama2", "gpt-oss"}

// familyJSON returns a family's tokenizer.json, decompressed.
func familyJSON(t testing.TB, family string) []byte {
	t.Helper()
	gz, err := os.ReadFile("../modelfiles/testdata/" + family + "/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var familyToks sync.Map // family -> *Tokenizer with the default caches

// familyTokenizer loads a family's tokenizer once per test binary, with the
// default caches or with none (the same tables without the caches, which is
// what loading with Config{} builds, at half the test time).
func familyTokenizer(t testing.TB, family string, cached bool) *Tokenizer {
	t.Helper()
	tok, ok := familyToks.Load(family)
	if !ok {
		loaded, err := LoadJSONConfig(familyJSON(t, family), DefaultConfig())
		if err != nil {
			t.Fatalf("%s: %v", family, err)
		}
		tok, _ = familyToks.LoadOrStore(family, loaded)
	}
	if cached {
		return tok.(*Tokenizer)
	}
	plain := *tok.(*Tokenizer)
	plain.cache, plain.segments = nil, nil
	return &plain
}

func readFamilyGoldens(t testing.TB, family string) []familyGolden {
	t.Helper()
	f, err := os.Open("testdata/" + family + "_golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []familyGolden
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var g familyGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 280 {
		t.Fatalf("%s: only %d goldens", family, len(out))
	}
	return out
}

// TestFamilyGoldens compares every golden of every family exactly: twice
// with the default caches (the second pass runs from them), then with
// every cache disabled.
func TestFamilyGoldens(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			gs := readFamilyGoldens(t, fam)
			cached := familyTokenizer(t, fam, true)
			for pass, tok := range []*Tokenizer{cached, cached, familyTokenizer(t, fam, false)} {
				bad := 0
				for _, g := range gs {
					got := tok.Encode(g.Text, g.Special)
					if !slices.Equal(got, g.IDs) {
						bad++
						if bad <= 8 {
							t.Errorf("pass %d: Encode(%q, %v)\n got %v\nwant %v", pass, trunc(g.Text), g.Special, truncIDs(got), truncIDs(g.IDs))
						}
					}
				}
				if bad > 0 {
					t.Fatalf("pass %d: %d of %d goldens differ", pass, bad, len(gs))
				}
			}
			bad := 0
			for _, g := range gs {
				// EncodeLimit accepts at exactly the golden's count.
				ids, ok := cached.EncodeLimit(g.Text, g.Special, len(g.IDs))
				_, over := cached.EncodeLimit(g.Text, g.Special, len(g.IDs)-1)
				if len(g.IDs) > 1 && (!ok || !slices.Equal(ids, g.IDs) || over) {
					t.Errorf("EncodeLimit(%q, %d): ok %v, equal %v; at %d: ok %v", trunc(g.Text), len(g.IDs), ok, slices.Equal(ids, g.IDs), len(g.IDs)-1, over)
				}
				if got := cached.Decode(g.IDs); got != g.Decoded {
					bad++
					if bad <= 8 {
						t.Errorf("Decode(%v)\n got %q\nwant %q", truncIDs(g.IDs), trunc(got), trunc(g.Decoded))
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d decodes differ", bad, len(gs))
			}
		})
	}
}

// FuzzFamilyEncode: Llama 2 (SentencePiece-style, the quickest to load)
// never panics, gives ids in range, and cutting words before "▁"
// (chunkWords) gives the ids of merging each word whole.
func FuzzFamilyEncode(f *testing.F) {
	for _, s := range []string{"Hello  world", "<s>[INST] hi [/INST]", "a>  </b> x", "e\u0301 \u00a0 \t\n", "\xff\xe4 🫠", "<bos><start_of_turn>user\nhi"} {
		f.Add(s, false)
	}
	var toks, whole []*Tokenizer
	for _, fam := range []string{"llama2"} {
		tok := familyTokenizer(f, fam, true)
		w := *familyTokenizer(f, fam, false)
		w.chunkWords = false
		toks, whole = append(toks, tok), append(whole, &w)
	}
	f.Fuzz(func(t *testing.T, s string, special bool) {
		for i, tok := range toks {
			ids := tok.Encode(s, special)
			for _, id := range ids {
				if int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range", id)
				}
			}
			if want := whole[i].Encode(s, special); !slices.Equal(ids, want) {
				t.Fatalf("Encode(%q): chunked %v, whole %v", s, ids, want)
			}
			_ = tok.Decode(ids)
		}
	})
}

// TestChunkWordsExact checks on random text that cutting words before "▁"
// changes no id, for Llama 2 and Gemma 3 (whose merges join '>' to a
// following "▁": ">▁</").
func TestChunkWordsExact(t *testing.T) {
	alphabet := []rune("ab> </\n\t▁▁x.,é你😀")
	for _, fam := range []string{"llama2", "gemma3"} {
		tok := familyTokenizer(t, fam, false)
		if !tok.chunkWords {
			t.Fatalf("%s: chunkWords off", fam)
		}
		whole := *tok
		whole.chunkWords = false
		for _, s := range []string{"a> </b", "x> </y>", "> </", "  a  b  "} {
			if got, want := tok.Encode(s, false), whole.Encode(s, false); !slices.Equal(got, want) {
				t.Fatalf("%s: Encode(%q): chunked %v, whole %v", fam, s, got, want)
			}
		}
		rapid.Check(t, func(t *rapid.T) {
			s := string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 60).Draw(t, "runes"))
			if got, want := tok.Encode(s, false), whole.Encode(s, false); !slices.Equal(got, want) {
				t.Fatalf("%s: Encode(%q): chunked %v, whole %v", fam, s, got, want)
			}
		})
	}
}
