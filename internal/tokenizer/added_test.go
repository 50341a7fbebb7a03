package tokenizer

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// naiveSplit is addedMatcher.split as first written: every byte is tried
// as a token start, against every token. It is the reference for the
// skipping, trie-based version.
func naiveSplit(m *addedMatcher, s string) []string {
	var out []string
	emitted := 0
	for i := 0; i < len(s); {
		hit := -1
		for k, tok := range m.tokens { // the longest, the file's first on ties
			c := tok.Content
			if len(c) <= len(s)-i && s[i:i+len(c)] == c && (hit < 0 || len(c) > len(m.tokens[hit].Content)) {
				hit = k
			}
		}
		if hit < 0 {
			i++
			continue
		}
		t := &m.tokens[hit]
		start, stop := i, i+len(t.Content)
		if t.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[stop:])) {
			i = stop
			continue
		}
		if t.LStrip {
			start = max(trimRightSpaceLen(s[:start]), emitted)
		}
		if t.RStrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if start > emitted {
			out = append(out, "text:"+s[emitted:start])
		}
		out = append(out, fmt.Sprint("token:", t.ID))
		emitted = stop
		i = stop
	}
	if emitted < len(s) {
		out = append(out, "text:"+s[emitted:])
	}
	return out
}

// TestAddedSplitMatchesNaive checks the skipping split against the naive
// one, with token sets that share one first byte (the IndexByte path) and
// sets that do not (the table path).
func TestAddedSplitMatchesNaive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alphabet := rapid.SampledFrom([]string{"<", ">", "|", "a", "b", "h", "i", " ", "\n", "é", "<|", "|>"})
		word := rapid.Custom(func(t *rapid.T) string {
			parts := rapid.SliceOfN(alphabet, 1, 4).Draw(t, "parts")
			s := ""
			for _, p := range parts {
				s += p
			}
			return s
		})
		sameFirst := rapid.Bool().Draw(t, "sameFirst")
		var tokens []addedToken
		for i, c := range rapid.SliceOfN(word, 1, 5).Draw(t, "tokens") {
			if sameFirst {
				c = "<" + c
			}
			tokens = append(tokens, addedToken{ID: uint32(1000 + i), Content: c,
				SingleWord: rapid.Bool().Draw(t, "single"), LStrip: rapid.Bool().Draw(t, "lstrip"), RStrip: rapid.Bool().Draw(t, "rstrip")})
		}
		m := newAddedMatcher(tokens)
		if sameFirst && m.only != '<' {
			t.Fatalf("only = %d, want '<'", m.only)
		}
		s := ""
		for _, p := range rapid.SliceOfN(alphabet, 0, 40).Draw(t, "text") {
			s += p
		}
		var got []string
		m.split(s, func(seg string) { got = append(got, "text:"+seg) }, func(id uint32) { got = append(got, fmt.Sprint("token:", id)) }, nil)
		if want := naiveSplit(m, s); !slices.Equal(got, want) {
			t.Fatalf("split(%q) = %q, want %q", s, got, want)
		}
	})
}
