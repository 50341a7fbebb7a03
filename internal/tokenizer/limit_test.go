package tokenizer

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// EncodeLimit gives Encode's ids for every text within its limit and
// refuses every text one token over it; a refusal leaves the caches
// consistent (the text is encoded the same afterwards).
func TestEncodeLimitMatchesEncode(t *testing.T) {
	tok, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range readGoldens(t) {
		want := tok.Encode(g.Text, false)
		n := len(want)
		if n > 1 {
			if ids, ok := tok.EncodeLimit(g.Text, false, n-1); ok || ids != nil {
				t.Fatalf("%.40q: %d tokens accepted under a limit of %d", g.Text, n, n-1)
			}
		}
		for _, limit := range []int{n, n + 1, 0} {
			ids, ok := tok.EncodeLimit(g.Text, false, limit)
			if !ok || !slices.Equal(ids, want) {
				t.Fatalf("%.40q limit %d: ok %v, %d ids, want Encode's %d", g.Text, limit, ok, len(ids), n)
			}
		}
	}
}

// allocated is the heap bytes fn allocates.
func allocated(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// A text far over the limit costs the work of the limit: many words stop
// at the first token past it; one huge word, which BPE would merge over
// its whole length, is judged by its least token count before any merging.
// Work is measured as bytes allocated: encoding any of these 1 MiB texts
// in full allocates at least its ids (4 bytes each: 860 KB for the many
// words' 214,000 tokens) and, for a long word, BPE's working memory (40
// bytes a byte: 40 MB), against a few hundred bytes when stopping early.
func TestEncodeLimitStopsEarly(t *testing.T) {
	tok, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	const size = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	var word strings.Builder
	for word.Len() < size {
		word.WriteByte(byte('a' + rng.IntN(26)))
	}
	texts := map[string]string{
		"one word":   word.String(),
		"many words": strings.Repeat("the quick brown fox jumps over the lazy dog ", size/44),
		"one letter": strings.Repeat("a", size),
	}
	const limit = 5000 // the byte bound alone (size / 256-byte longest token: 4096) is not decisive
	for name, text := range texts {
		early := allocated(func() {
			if _, ok := tok.EncodeLimit(text, false, limit); ok {
				t.Fatalf("%s: accepted over the limit", name)
			}
		})
		if early > 256<<10 {
			t.Errorf("%s: EncodeLimit allocated %d bytes: it did not stop early", name, early)
		}
	}
}

// EncodeLimit accepts exactly the texts Encode gives at most limit ids for,
// with Encode's ids.
func FuzzEncodeLimit(f *testing.F) {
	for _, s := range []string{"hello world", "<|im_start|>user\nhi<|im_end|>", strings.Repeat("a", 300), "路由器 キャッシュ", " \n\t x"} {
		f.Add(s, uint16(3), false)
		f.Add(s, uint16(0), true)
	}
	tok, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string, limit uint16, special bool) {
		want := tok.Encode(text, special)
		ids, ok := tok.EncodeLimit(text, special, int(limit))
		if fits := limit == 0 || len(want) <= int(limit); ok != fits || (ok && !slices.Equal(ids, want)) {
			t.Fatalf("limit %d: ok %v with %d ids; Encode gives %d", limit, ok, len(ids), len(want))
		}
	})
}
