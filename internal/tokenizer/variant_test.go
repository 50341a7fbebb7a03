package tokenizer

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestVariantGoldens loads the Llama 2 tokenizer.json with sections
// replaced as testdata/variants.json says (Metaspace with each prepend
// scheme, split and the legacy add_prefix_space; Digits; Split with every
// behaviour, invert and literal patterns; Replace with a regex, Prepend,
// NFKC; the Metaspace decoder) and compares ids and decodes with
// testdata/variants_golden.jsonl, written by HuggingFace's Rust tokenizers
// (tools/tokgold/variants.mjs).
func TestVariantGoldens(t *testing.T) {
	var base map[string]json.RawMessage
	if err := json.Unmarshal(familyJSON(t, "llama2"), &base); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/variants.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Variants map[string]map[string]json.RawMessage `json:"variants"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	toks, raws := map[string]*Tokenizer{}, map[string][]byte{}
	for name, sections := range doc.Variants {
		m := map[string]json.RawMessage{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range sections {
			m[k] = v
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if toks[name], err = LoadJSON(raw); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raws[name] = raw
	}
	t.Run("no decoder", func(t *testing.T) {
		// Without a decoder HuggingFace joins the tokens with spaces (ids
		// and text from Rust tokenizers 0.23.2).
		m := map[string]json.RawMessage{}
		for k, v := range base {
			m[k] = v
		}
		m["decoder"] = json.RawMessage("null")
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := LoadJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		ids := tok.Encode("Hello world <s>x", false)
		if want := []uint32{22557, 1526, 28705, 1, 1318}; !slices.Equal(ids, want) {
			t.Fatalf("Encode = %v, want %v", ids, want)
		}
		if got, want := tok.Decode(ids), "\u2581Hello \u2581world \u2581 <s> \u2581x"; got != want {
			t.Fatalf("Decode = %q, want %q", got, want)
		}
	})
	t.Run("segment cache and prepend_scheme first", func(t *testing.T) {
		// A long stretch gets a "▁" prepended only at the start of the
		// text: the segment cache must not hand one position's ids to the
		// other, in either order.
		cached := toks["metaspace-first"]
		plain, err := LoadJSONConfig(raws["metaspace-first"], Config{})
		if err != nil {
			t.Fatal(err)
		}
		long := strings.Repeat("kv caches route requests ", 12)
		for _, text := range []string{"</s>" + long, long, "</s>" + long, long} {
			if got, want := cached.Encode(text, false), plain.Encode(text, false); !slices.Equal(got, want) {
				t.Fatalf("Encode(%q) with caches %v, without %v", trunc(text), truncIDs(got), truncIDs(want))
			}
		}
		if a, b := plain.Encode(long, false), plain.Encode("</s>"+long, false); slices.Equal(a, b[1:]) {
			t.Fatal("the start of the text and after a special token tokenize alike: the case tests nothing")
		}
	})
	f, err := os.Open("testdata/variants_golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	n, bad := map[string]int{}, 0
	for sc.Scan() {
		var g struct {
			Variant, Text, Decoded string
			IDs                    []uint32
		}
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		tok := toks[g.Variant]
		if tok == nil {
			t.Fatalf("golden for unknown variant %q", g.Variant)
		}
		n[g.Variant]++
		if got := tok.Encode(g.Text, false); !slices.Equal(got, g.IDs) {
			bad++
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", g.Variant, trunc(g.Text), truncIDs(got), truncIDs(g.IDs))
		} else if got := tok.Decode(g.IDs); got != g.Decoded {
			bad++
			t.Errorf("%s: Decode(%v)\n got %q\nwant %q", g.Variant, truncIDs(g.IDs), trunc(got), trunc(g.Decoded))
		}
		if bad > 10 {
			t.Fatal("too many differences")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range doc.Variants {
		if n[name] < 150 {
			t.Errorf("%s: only %d goldens", name, n[name])
		}
	}
}
