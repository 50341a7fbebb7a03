package tokenizer

import (
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// naiveBPE is a deliberately simple BPE over byte-level strings, with merge
// ranks keyed by token strings. It is built from the loaded tokenizer's
// tables (whose parsing the goldens check), so it is independent of the
// merge loops under test, not of the file parser.
type naiveBPE struct {
	vocab map[string]uint32
	ranks map[[2]string]int
}

func loadNaive(t testing.TB) *naiveBPE {
	tok := qwen3(t)
	n := &naiveBPE{vocab: map[string]uint32{}, ranks: make(map[[2]string]int, tok.model.merges.len())}
	tok.vocab.all(func(k string, v uint32) { n.vocab[k] = v })
	for _, s := range tok.model.merges.slots {
		if s.nkey == 0 {
			continue
		}
		key := ^s.nkey
		a, b := uint32(key>>32), uint32(key)
		n.ranks[[2]string{tok.idToken.at(int(a)), tok.idToken.at(int(b))}] = int(s.val >> 32)
	}
	if len(n.ranks) != 151387 {
		t.Fatalf("naive model has %d merges, want 151387", len(n.ranks))
	}
	return n
}

// encode merges the lowest-ranked adjacent pair (leftmost on ties) until no
// pair has a rank, by rescanning everything each time.
func (n *naiveBPE) encode(raw string) []uint32 {
	var syms []string
	for _, r := range byteLevelEncode(raw) {
		syms = append(syms, string(r))
	}
	for {
		best, bestRank := -1, int(^uint(0)>>1)
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := n.ranks[[2]string{syms[i], syms[i+1]}]; ok && r < bestRank {
				best, bestRank = i, r
			}
		}
		if best < 0 {
			break
		}
		syms[best] += syms[best+1]
		syms = slices.Delete(syms, best+1, best+2)
	}
	ids := make([]uint32, len(syms))
	for i, s := range syms {
		ids[i] = n.vocab[s]
	}
	return ids
}

// wordAlphabet biases random words towards merges that exist.
var wordAlphabet = []string{"a", "e", "i", "o", "n", "t", "s", "r", "l", "th", "ing", " ", "  ", "\n", "\t",
	"1", "0", "'", ".", ",", "(", ")", "é", "ü", "你", "好", "世", "界", "の", "😀", "🏽", "\u200d", "\xff", "\x00", "ab", "aa"}

// TestBPEMatchesNaive compares both merge loops with the naive model on
// random words, short (scan path) and long (heap path).
func TestBPEMatchesNaive(t *testing.T) {
	tok := qwen3(t)
	nb := loadNaive(t)
	rapid.Check(t, func(t *rapid.T) {
		parts := rapid.SliceOfN(rapid.SampledFrom(wordAlphabet), 1, 30).Draw(t, "parts")
		w := strings.Join(parts, "")
		want := nb.encode(w)
		got := tok.model.appendWord(nil, w)
		if !slices.Equal(got, want) {
			t.Fatalf("appendWord(%q) = %v, naive %v", w, got, want)
		}
		if len(w) >= 2 {
			if h := tok.model.appendHeap(nil, tok.model.byteSymbols(w)); !slices.Equal(h, want) {
				t.Fatalf("appendHeap(%q) = %v, naive %v", w, h, want)
			}
		}
		if len(w) >= 2 && len(w) <= heapThreshold {
			if s := tok.model.appendScan(nil, tok.model.byteSymbols(w)); !slices.Equal(s, want) {
				t.Fatalf("appendScan(%q) = %v, naive %v", w, s, want)
			}
		}
	})
}

// TestBPERepeatedPairs pins the leftmost-on-ties rule, which decides runs of
// one repeated character.
func TestBPERepeatedPairs(t *testing.T) {
	tok := qwen3(t)
	nb := loadNaive(t)
	for _, w := range []string{"aaa", "aaaaa", strings.Repeat("a", 49), strings.Repeat(" ", 7), strings.Repeat(" ", 100), strings.Repeat("=", 77)} {
		if got, want := tok.model.appendWord(nil, w), nb.encode(w); !slices.Equal(got, want) {
			t.Errorf("appendWord(%q) = %v, naive %v", w, got, want)
		}
	}
}
