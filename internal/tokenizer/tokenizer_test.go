package tokenizer

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
	"pgregory.net/rapid"
)

// tiny builds a small byte-level tokenizer.json: the 256 byte tokens get ids
// equal to their byte value, extra tokens follow from id 256.
type tiny struct {
	extra        []string // extra vocab tokens, byte-level form
	merges       any      // []string or [][2]string
	ignoreMerges bool
	added        []map[string]any
	normalizer   any
	pre          any
	post         any
	decoder      any
	modelType    string
	dropout      any
}

func (c tiny) json(t testing.TB) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	for i, e := range c.extra {
		vocab[e] = 256 + i
	}
	typ := c.modelType
	if typ == "" {
		typ = "BPE"
	}
	pre := c.pre
	if pre == nil {
		pre = map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwenPattern}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}}
	}
	dec := c.decoder
	if dec == nil {
		dec = map[string]any{"type": "ByteLevel"}
	}
	merges := c.merges
	if merges == nil {
		merges = []string{}
	}
	f := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens":   c.added,
		"normalizer":     c.normalizer,
		"pre_tokenizer":  pre,
		"post_processor": c.post,
		"decoder":        dec,
		"model": map[string]any{"type": typ, "dropout": c.dropout, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": c.ignoreMerges,
			"vocab": vocab, "merges": merges},
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (c tiny) load(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := LoadJSON(c.json(t))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func bytesIDs(s string) []uint32 {
	ids := make([]uint32, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = uint32(s[i])
	}
	return ids
}

func TestMergesBothForms(t *testing.T) {
	extra := []string{"ab", "abc", "Ġx"}
	str := tiny{extra: extra, merges: []string{"a b", "ab c", "Ġ x"}}.load(t)
	pair := tiny{extra: extra, merges: [][2]string{{"a", "b"}, {"ab", "c"}, {"Ġ", "x"}}}.load(t)
	for _, in := range []string{"abc", "abcab x", "cab"} {
		a, b := str.Encode(in, false), pair.Encode(in, false)
		if !slices.Equal(a, b) {
			t.Errorf("%q: string form %v, pair form %v", in, a, b)
		}
	}
	if got, want := str.Encode("abc ab x", false), []uint32{257, ' ', 256, 258}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}

func TestIgnoreMerges(t *testing.T) {
	c := tiny{extra: []string{"ab", "abc"}, merges: []string{"a b"}}
	if got, want := c.load(t).Encode("abc", false), []uint32{256, 'c'}; !slices.Equal(got, want) {
		t.Errorf("without ignore_merges: %v, want %v", got, want)
	}
	c.ignoreMerges = true
	if got, want := c.load(t).Encode("abc", false), []uint32{257}; !slices.Equal(got, want) {
		t.Errorf("with ignore_merges: %v, want %v", got, want)
	}
}

func TestTemplateProcessing(t *testing.T) {
	c := tiny{
		added: []map[string]any{
			{"id": 300, "content": "<s>", "special": true, "normalized": false},
			{"id": 301, "content": "</s>", "special": true, "normalized": false},
		},
		post: map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
			map[string]any{"type": "TemplateProcessing",
				"single": []any{
					map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
					map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
					map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}},
				},
				"pair":           []any{},
				"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{300}, "tokens": []string{"<s>"}}, "</s>": map[string]any{"id": "</s>", "ids": []int{301}, "tokens": []string{"</s>"}}},
			},
		}},
	}
	tok := c.load(t)
	if got, want := tok.Encode("hi", true), []uint32{300, 'h', 'i', 301}; !slices.Equal(got, want) {
		t.Errorf("with special tokens: %v, want %v", got, want)
	}
	if got, want := tok.Encode("hi", false), []uint32{'h', 'i'}; !slices.Equal(got, want) {
		t.Errorf("without: %v, want %v", got, want)
	}
	if got := tok.Decode(tok.Encode("hi", true)); got != "<s>hi</s>" {
		t.Errorf("Decode = %q", got)
	}
	if !tok.IsSpecial(300) || tok.IsSpecial('h') {
		t.Error("IsSpecial wrong")
	}
}

func TestAddedTokenFlags(t *testing.T) {
	c := tiny{added: []map[string]any{
		{"id": 400, "content": "<m>", "lstrip": true, "rstrip": true, "normalized": false},
		{"id": 401, "content": "hi", "single_word": true, "normalized": false},
		{"id": 402, "content": "<mm>", "normalized": false},
		{"id": 403, "content": "<", "normalized": false},
	}}
	tok := c.load(t)
	for _, tc := range []struct {
		in   string
		want []uint32
	}{
		{"a  <m>  b", []uint32{'a', 400, 'b'}},
		{"hi there", []uint32{401, ' ', 't', 'h', 'e', 'r', 'e'}},
		{"this", []uint32{'t', 'h', 'i', 's'}},
		{"(hi)", []uint32{'(', 401, ')'}},
		{"<mm><m", []uint32{402, 403, 'm'}}, // longest match first
	} {
		if got := tok.Encode(tc.in, false); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestAddedTokenPasses: tokens with normalized=false are found first, on the
// raw text; normalized ones only in what is left, even when they would match
// further left.
func TestAddedTokenPasses(t *testing.T) {
	tok := tiny{added: []map[string]any{
		{"id": 500, "content": "<a>", "normalized": false},
		{"id": 501, "content": "a><", "normalized": true},
	}}.load(t)
	if got, want := tok.Encode("xa><a>", false), []uint32{'x', 'a', '>', 500}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got, want := tok.Encode("a><", false), []uint32{501}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
}

func TestNormalizerOnlyWhenConfigured(t *testing.T) {
	in := "e\u0301" // decomposed é
	plain := tiny{}.load(t)
	if got, want := plain.Encode(in, false), bytesIDs(in); !slices.Equal(got, want) {
		t.Errorf("no normalizer: %v, want %v", got, want)
	}
	nfc := tiny{normalizer: map[string]any{"type": "NFC"}}.load(t)
	if got, want := nfc.Encode(in, false), bytesIDs("\u00e9"); !slices.Equal(got, want) {
		t.Errorf("NFC: %v, want %v", got, want)
	}
	seq := tiny{normalizer: map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFKC"}}}}.load(t)
	if got, want := seq.Encode("\ufb01", false), bytesIDs("fi"); !slices.Equal(got, want) {
		t.Errorf("NFKC: %v, want %v", got, want)
	}
}

func TestByteLevelPrefixSpaceAndRegex(t *testing.T) {
	c := tiny{
		extra:  []string{"Ġh", "Ġhi"},
		merges: []string{"Ġ h", "Ġh i"},
		pre:    map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
	}
	tok := c.load(t)
	if got, want := tok.Encode("hi hi", false), []uint32{257, 257}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got := tok.Decode(tok.Encode("hi", false)); got != " hi" {
		t.Errorf("Decode = %q, want prefix space", got)
	}
}

func TestRefusesUnsupported(t *testing.T) {
	for name, c := range map[string]tiny{
		"WordPiece":       {modelType: "WordPiece"},
		"Unigram":         {modelType: "Unigram"},
		"WordLevel":       {modelType: "WordLevel"},
		"dropout":         {dropout: 0.1},
		"Lowercase":       {normalizer: map[string]any{"type": "Lowercase"}},
		"Whitespace":      {pre: map[string]any{"type": "Whitespace"}},
		"Punctuation":     {pre: map[string]any{"type": "Punctuation"}},
		"Split behavior":  {pre: map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways", "invert": false}, map[string]any{"type": "ByteLevel"}}}},
		"after ByteLevel": {pre: map[string]any{"type": "Sequence", "pretokenizers": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Digits"}}}},
		"byte-level dec":  {decoder: map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Fuse"}}}},
		"Metaspace":       {pre: map[string]any{"type": "Metaspace", "prepend_scheme": "sometimes"}},
		"WordPiece dec":   {decoder: map[string]any{"type": "WordPiece"}},
		"Bert processing": {post: map[string]any{"type": "BertProcessing"}},
	} {
		_, err := LoadJSON(c.json(t))
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: err = %v, want ErrUnsupported", name, err)
		}
	}
	// A vocabulary without the byte alphabet is not byte-level.
	b := []byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"},"decoder":{"type":"ByteLevel"}}`)
	if _, err := LoadJSON(b); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no byte alphabet: err = %v, want ErrUnsupported", err)
	}
}

func TestRejectsInvalid(t *testing.T) {
	good := tiny{extra: []string{"ab"}, merges: []string{"a b"}}.json(t)
	for name, b := range map[string][]byte{
		"empty":         nil,
		"garbage":       []byte("not json"),
		"truncated":     good[:len(good)/2],
		"trailing":      append(append([]byte{}, good...), []byte(" x")...),
		"unknown merge": tiny{merges: []string{"a q9"}}.json(t),
		"bad merge":     tiny{merges: []string{"abc"}}.json(t),
		"no model":      []byte(`{"pre_tokenizer":null}`),
		"huge id":       tiny{added: []map[string]any{{"id": 4294967295, "content": "<x>"}}}.json(t),
	} {
		if _, err := LoadJSON(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := LoadJSONConfig(good, Config{CacheWords: -1}); err == nil {
		t.Error("negative CacheWords accepted")
	}
}

func TestLoadReader(t *testing.T) {
	tok, err := Load(strings.NewReader(string(tiny{}.json(t))))
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 256 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

// TestQwen3KnownIDs pins ids quoted in HuggingFace's model files and docs.
func TestQwen3KnownIDs(t *testing.T) {
	tok := qwen3(t)
	for tokStr, id := range map[string]uint32{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "Ġworld": 1879, "Hello": 9707, "Ċ": 198, "assistant": 77091, "<think>": 151667, "</think>": 151668} {
		got, ok := tok.TokenToID(tokStr)
		if !ok || got != id {
			t.Errorf("TokenToID(%q) = %d, %v; want %d", tokStr, got, ok, id)
		}
		if back, ok := tok.IDToToken(id); !ok || back != tokStr {
			t.Errorf("IDToToken(%d) = %q, %v", id, back, ok)
		}
	}
	if _, ok := tok.IDToToken(1 << 30); ok {
		t.Error("IDToToken of a huge id succeeded")
	}
	if _, ok := tok.TokenToID("no such token at all"); ok {
		t.Error("TokenToID of a missing token succeeded")
	}
	if got := tok.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if !tok.IsSpecial(151644) || tok.IsSpecial(9707) || tok.IsSpecial(151657) {
		t.Error("IsSpecial: <|im_start|> special, Hello and <tool_call> not")
	}
	if got := tok.Encode("Hello", true); !slices.Equal(got, []uint32{9707}) {
		t.Errorf("Qwen3 adds no special tokens, got %v", got)
	}
}

func TestDecode(t *testing.T) {
	tok := qwen3(t)
	ids := tok.Encode("<|im_start|>user\n你好 👍🏽<|im_end|>", false)
	if got := tok.Decode(ids); got != "<|im_start|>user\n你好 👍🏽<|im_end|>" {
		t.Errorf("Decode = %q", got)
	}
	if got := tok.Decode(append([]uint32{9707, 1 << 31}, 1879)); got != "Hello world" {
		t.Errorf("unknown ids not skipped: %q", got)
	}
	// Cutting a character in the middle yields one U+FFFD per maximal
	// invalid subsequence, as Rust's from_utf8_lossy and WHATWG decoders do.
	for _, tc := range []struct{ in, want string }{
		{"\xe4\xbd", "\uFFFD"},
		{"\xe4\xbda", "\uFFFDa"},
		{"\xff\xfe", "\uFFFD\uFFFD"},
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: lead byte then two strays
		{"a\xc3", "a\uFFFD"},
		{"\xc3\xa9", "é"},
	} {
		if got := string(appendLossy(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("lossy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A token holding half a character decodes to U+FFFD.
	half, _ := tok.TokenToID(string(byteToRune[0xe4]))
	if got := tok.Decode([]uint32{half}); got != "\uFFFD" {
		t.Errorf("Decode(half char) = %q", got)
	}
}

// TestEncodeInvalidUTF8 checks that invalid input is encoded as its lossy
// repair (the reference only accepts valid strings).
func TestEncodeInvalidUTF8(t *testing.T) {
	tok := qwen3(t)
	for _, tc := range []struct{ in, same string }{
		{"\xff", "\uFFFD"},
		{"a\xe4\xbdb", "a\uFFFDb"},
		{"ok\xc3", "ok\uFFFD"},
	} {
		if got, want := tok.Encode(tc.in, false), tok.Encode(tc.same, false); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (as %q)", tc.in, got, want, tc.same)
		}
	}
}

// roundTripWant is what Decode(Encode(s)) must give for Qwen3: the lossy
// repair of s, NFC-normalised. (Strictly, HuggingFace normalises each stretch
// between added tokens separately; for Qwen3, whose added tokens all start
// with '<' and end with '>' — characters that never compose or reorder —
// that equals normalising the whole string.)
func roundTripWant(s string) string { return norm.NFC.String(validUTF8(s)) }

func TestRoundTrip(t *testing.T) {
	tok := qwen3(t)
	for _, g := range readGoldens(t) {
		if got, want := tok.Decode(g.IDs), roundTripWant(g.Text); got != want {
			t.Errorf("Decode(golden %q) = %q", trunc(g.Text), trunc(got))
		}
	}
	alphabet := append(append([]rune{}, splitAlphabet...), []rune("<|im_start|><|im_end|>\u0308\u0323\u212b\u1100\u1161")...)
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 60).Draw(t, "runes"))
		if rapid.Bool().Draw(t, "special") {
			s += "<|im_end|>" + s
		}
		if got, want := tok.Decode(tok.Encode(s, false)), roundTripWant(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}

// FuzzRoundTrip: Encode never panics and Decode(Encode(s)) is the NFC form
// of s's lossy UTF-8 repair.
func FuzzRoundTrip(f *testing.F) {
	tok, err := Default()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"Hello  world", "<|im_start|>user\nhi<|im_end|>", "e\u0301\u0323", "\xff\xe4\xbd", "你好 👍🏽", "  \r\n\t x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, true)
		for _, id := range ids {
			if int(id) >= tok.VocabSize() {
				t.Fatalf("id %d out of range", id)
			}
		}
		if got, want := tok.Decode(ids), roundTripWant(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}

// FuzzLoadJSON: malformed tokenizer files yield errors, never panics.
func FuzzLoadJSON(f *testing.F) {
	f.Add(tiny{extra: []string{"ab"}, merges: []string{"a b"}}.json(f))
	f.Add(tiny{extra: []string{"ab"}, merges: [][2]string{{"a", "b"}}, normalizer: map[string]any{"type": "NFC"}}.json(f))
	f.Add([]byte(`{"model":{"vocab":{"\u0041":1,"\ud83d\ude00":2},"merges":[["a","b"]]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := LoadJSON(b)
		if err == nil {
			tok.Decode(tok.Encode("Hello wörld <s> 123", true))
		}
	})
}

// TestConcurrentEncode shares one tokenizer (and its cache) between
// goroutines; run with -race.
func TestConcurrentEncode(t *testing.T) {
	tok := qwen3(t)
	gs := readGoldens(t)
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range gs {
				g := gs[(i*7+w)%len(gs)]
				if !slices.Equal(tok.Encode(g.Text, false), g.IDs) {
					errs <- g.Text
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", trunc(s))
	}
}

func TestCacheBounded(t *testing.T) {
	c := newWordCache(32)
	last := map[string]uint32{}
	for i := 0; i < 1000; i++ {
		w := strings.Repeat("x", i%50) + string(rune('a'+i%26))
		c.put(w, []uint32{uint32(i), uint32(len(w))})
		last[w] = uint32(i)
	}
	if total := c.len(); total > 32 || total == 0 {
		t.Errorf("cache holds %d words, capacity 32", total)
	}
	hits := 0
	for w, i := range last { // whatever is still cached is the last put
		if ids, ok := c.get(w); ok {
			hits++
			if !slices.Equal(ids, []uint32{i, uint32(len(w))}) {
				t.Errorf("get(%q) = %v, want [%d %d]", w, ids, i, len(w))
			}
		}
	}
	if hits != c.len() {
		t.Errorf("%d words found, cache holds %d", hits, c.len())
	}
	if newWordCache(0) != nil {
		t.Error("capacity 0 should disable the cache")
	}
}

// TestSegmentCacheExact encodes a growing conversation with the segment
// cache and compares each prompt with an uncached tokenizer; then checks the
// byte budget and LRU order.
func TestSegmentCacheExact(t *testing.T) {
	cached, plain := qwen3(t), qwen3Uncached(t)
	for round := 0; round < 2; round++ {
		for i, p := range conversation(12) {
			if got, want := cached.Encode(p, false), plain.Encode(p, false); !slices.Equal(got, want) {
				t.Fatalf("round %d prompt %d differs with the segment cache", round, i)
			}
		}
	}
	cost := entryCost(strings.Repeat("x", 300), make([]uint32, 10))
	c := newSegmentCache(4 * cost)
	text := func(c byte) string { return strings.Repeat(string(c), 300) }
	for _, k := range "abde" {
		c.put(text(byte(k)), make([]uint32, 10))
	}
	if _, ok := c.get(text('a')); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	c.put(text('f'), make([]uint32, 10)) // evicts b, the least recent
	if _, ok := c.get(text('b')); ok {
		t.Error("b should have been evicted")
	}
	for _, k := range "adef" {
		if _, ok := c.get(text(byte(k))); !ok {
			t.Errorf("%c should have survived", k)
		}
	}
	c.put(strings.Repeat("z", 4*cost), nil) // larger than a quarter: not kept
	if _, ok := c.get(strings.Repeat("z", 4*cost)); ok {
		t.Error("oversized entry kept")
	}
	if c.used > c.budget {
		t.Errorf("used %d > budget %d", c.used, c.budget)
	}
	if newSegmentCache(0) != nil {
		t.Error("budget 0 should disable the cache")
	}
}
