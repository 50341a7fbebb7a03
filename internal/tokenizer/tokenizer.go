package tokenizer

import (
	"slices"
	"strings"

	"sync"
	"unicode/utf8"

	qwen3files "github.com/kvrouter/kvrouter/internal/modelfiles/qwen3"
)

// Tokenizer encodes text to token ids and back for one byte-level BPE model.
// It is safe for concurrent use.
type Tokenizer struct {
	model model
	// vocab maps the model's tokens (byte-level form, as in the file) to ids.
	vocab *frozenMap
	// addedByContent maps added tokens' contents to their ids.
	addedByContent map[string]uint32
	// special holds the ids of added tokens flagged special.
	special map[uint32]bool
	// idToken is each id's token as written in the file ("" if unknown).
	idToken stringTable
	// known marks the ids that exist.
	known []bool
	// decoded is each id's bytes as the ByteLevel decoder produces them;
	// for a charLevel model, its text as the model sees it (the token, or
	// a <0xXX> token's byte), which is what minTokens needs.
	decoded stringTable
	// addedRaw matches added tokens with normalized=false (on raw text);
	// addedNorm those with normalized=true (on normalised text).
	addedRaw, addedNorm *addedMatcher
	// norm is the normalizer pipeline; normASCII is set when it leaves
	// ASCII text as it is (only normalization forms).
	norm      []normStep
	normASCII bool
	// stages is the pre-tokenizer pipeline; startSensitive is set when a
	// stage treats the text's first piece differently (Metaspace with
	// prepend_scheme "first"), which the segment cache must then respect.
	stages         []stage
	startSensitive bool
	// glue holds the characters some merge joins to a following "▁" (for
	// Gemma 3 only '>', from ">▁</"); chunkWords is set for a charLevel
	// model without ignore_merges whose "▁" is a token, where cutting a
	// word before any other "▁" cannot change its ids: no merge can
	// produce a token across the cut.
	glue       map[rune]bool
	chunkWords bool
	// dec is the decoder pipeline (nil: ByteLevel alone, the decoded table).
	dec []decStep
	// prefix and suffix are the ids a TemplateProcessing post-processor adds
	// around the text when special tokens are requested.
	prefix, suffix []uint32
	hasTemplate    bool
	cache          *wordCache
	segments       *segmentCache
}

// stage is one pre-tokenizer step. A plain stage has an optional prefix
// space (ByteLevel's add_prefix_space) added to each piece, then an
// optional Isolated split; the other kinds are a Split with another
// behaviour (spans), Metaspace and Digits.
type stage struct {
	kind        int
	prefixSpace bool
	split       splitter
	// stageSpans.
	match    matcher
	behavior int
	invert   bool
	// stageMetaspace.
	replacement string
	prepend     int
	splitMeta   bool
	// stageDigits.
	individual bool
}

// Encode returns the token ids of text. Added and special tokens written in
// the text (such as "<|im_start|>") are recognised. addSpecialTokens asks the
// post-processor to add its tokens (Llama 3's <|begin_of_text|>; Qwen3 adds
// none). Text that is not valid UTF-8 is repaired first (see the package
// documentation). Encode never fails.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) []uint32 {
	ids, _ := t.EncodeLimit(text, addSpecialTokens, 0)
	return ids
}

// EncodeLimit is Encode for a caller that refuses texts of more than limit
// tokens: it gives up as soon as the count passes limit and returns nil,
// false, having done work in proportion to the first limit tokens rather
// than to the text. A word too long to fit in what is left of limit is
// judged before it is merged: it has at least its length over the longest
// token made only of its bytes, so a huge single word is refused without
// running BPE over it. The ids of an accepted text are exactly Encode's.
// limit <= 0 means no limit.
func (t *Tokenizer) EncodeLimit(text string, addSpecialTokens bool, limit int) ([]uint32, bool) {
	text = validUTF8(text)
	e := encoders.Get().(*encoder)
	e.t, e.ids, e.limit, e.over, e.atStart = t, e.ids[:0], max(limit, 0), false, true
	if addSpecialTokens {
		e.ids = append(e.ids, t.prefix...)
	}
	t.addedRaw.split(text, e.rawSegment, e.token, &e.over)
	if addSpecialTokens {
		e.ids = append(e.ids, t.suffix...)
		e.check()
	}
	var ids []uint32
	ok := !e.over
	if ok {
		// The ids are gathered in the pooled encoder's buffer and copied
		// out at their exact size: the count is unknown in advance (a
		// guess from the text's length over-allocates long prompts by
		// half).
		ids = make([]uint32, len(e.ids))
		copy(ids, e.ids)
	}
	e.t = nil
	if cap(e.ids) <= maxPooledIDs {
		encoders.Put(e)
	}
	return ids, ok
}

// encoders pools encoders with their id and piece-end buffers.
var encoders = sync.Pool{New: func() any { return new(encoder) }}

// maxPooledIDs is the largest id buffer (ids) an encoder keeps in the pool:
// a huge prompt's buffer is left to the garbage collector.
const maxPooledIDs = 1 << 18

// encoder carries one Encode call's output through the pipeline's callbacks.
type encoder struct {
	t    *Tokenizer
	ids  []uint32
	ends [][]int
	// spans and matches are per-stage buffers of the non-plain stages.
	spans   [][]piece
	matches []int
	// atStart is set while nothing of the text has been emitted yet: the
	// next segment starts at the text's first byte.
	atStart bool
	// limit is EncodeLimit's (0: none); over is set once the ids
	// certainly exceed it, and then every step returns at once.
	limit int
	over  bool
}

// check sets over when the ids exceed the limit.
func (e *encoder) check() {
	if e.limit > 0 && len(e.ids) > e.limit {
		e.over = true
	}
}

func (e *encoder) token(id uint32) {
	e.atStart = false
	e.ids = append(e.ids, id)
	e.check()
}

func (e *encoder) rawSegment(seg string) {
	if e.over {
		return
	}
	if sc := e.t.segments; sc != nil && len(seg) >= minSegment && !(e.atStart && e.t.startSensitive) {
		if ids, ok := sc.get(seg); ok {
			if e.limit > 0 && len(e.ids)+len(ids) > e.limit {
				e.over = true
				return
			}
			e.ids = append(e.ids, ids...)
			return
		}
		n := len(e.ids)
		e.encodeSegment(seg)
		if !e.over { // a segment cut short is not cached
			sc.put(seg, slices.Clone(e.ids[n:]))
		}
		return
	}
	e.encodeSegment(seg)
}

// encodeSegment encodes a stretch of text between added tokens.
func (e *encoder) encodeSegment(seg string) {
	if len(e.t.norm) > 0 {
		seg = e.t.normalize(seg)
	}
	e.t.addedNorm.split(seg, e.normSegment, e.token, &e.over)
	e.atStart = false
}

func (e *encoder) normSegment(seg string) {
	if !e.over {
		e.pretokenize(seg, 0, e.atStart)
	}
	e.atStart = false
}

// pretokenize runs stage k and the following ones over s, encoding each
// resulting word. atStart is set when s begins at the text's first byte.
func (e *encoder) pretokenize(s string, k int, atStart bool) {
	if k == len(e.t.stages) {
		e.word(s)
		return
	}
	st := &e.t.stages[k]
	switch st.kind {
	case stageSpans, stageDigits:
		e.pretokenizeSpans(s, k, atStart)
		return
	case stageMetaspace:
		s = st.metaspace(s, atStart)
		if !st.splitMeta {
			e.pretokenize(s, k+1, atStart)
			return
		}
		e.pretokenizeSpans(s, k, atStart)
		return
	}
	if st.prefixSpace && s != "" && s[0] != ' ' {
		s = " " + s
	}
	if st.split == nil {
		e.pretokenize(s, k+1, atStart)
		return
	}
	if f, ok := st.split.(*fastSplitter); ok { // streams, no buffer
		// Stages that neither split nor add a space (Qwen's ByteLevel
		// after its Split) are skipped: each piece goes straight on.
		next := k + 1
		for next < len(e.t.stages) && e.t.stages[next].kind == stagePlain && !e.t.stages[next].prefixSpace && e.t.stages[next].split == nil {
			next++
		}
		for i := 0; i < len(s) && !e.over; {
			n := f.match(s, i)
			if next == len(e.t.stages) {
				e.word(s[i : i+n])
			} else {
				e.pretokenize(s[i:i+n], next, atStart && i == 0)
			}
			i += n
		}
		return
	}
	// Each stage has its own buffer of piece ends, reused across calls.
	for len(e.ends) <= k {
		e.ends = append(e.ends, nil)
	}
	ends := st.split.appendEnds(e.ends[k][:0], s)
	e.ends[k] = ends
	start := 0
	for _, end := range ends {
		if e.over {
			return
		}
		e.pretokenize(s[start:end], k+1, atStart && start == 0)
		start = end
	}
}

// pretokenizeSpans runs a stage that cuts s into pieces (a Split with a
// behaviour other than Isolated, Digits, a splitting Metaspace).
func (e *encoder) pretokenizeSpans(s string, k int, atStart bool) {
	st := &e.t.stages[k]
	for len(e.spans) <= k {
		e.spans = append(e.spans, nil)
	}
	spans := e.spans[k][:0]
	switch st.kind {
	case stageDigits:
		spans = appendDigitSpans(spans, s, st.individual)
	case stageMetaspace:
		e.matches = stringMatcher(st.replacement).appendMatches(e.matches[:0], s)
		spans = appendSpans(spans, e.matches, len(s), behaviorMergedWithNext, false)
	default:
		e.matches = st.match.appendMatches(e.matches[:0], s)
		spans = appendSpans(spans, e.matches, len(s), st.behavior, st.invert)
	}
	e.spans[k] = spans
	for _, p := range spans {
		if e.over {
			return
		}
		e.pretokenize(s[p.start:p.end], k+1, atStart && p.start == 0)
	}
}

// word appends the ids of one pre-tokenized word. A charLevel model's
// word (often a whole stretch of text: Llama 2 has no pre-tokenizer) is
// first cut before each "▁" that no merge can join to the character before
// it (see Tokenizer.glue), which changes no id and lets the word cache work.
func (e *encoder) word(w string) {
	t := e.t
	if !t.chunkWords || len(w) <= len(metaspace) {
		e.word1(w)
		return
	}
	start := 0
	for i := 1; i < len(w) && !e.over; {
		j := strings.Index(w[i:], metaspace)
		if j < 0 {
			break
		}
		p := i + j
		if prev, _ := utf8.DecodeLastRuneInString(w[:p]); prev != metaspaceRune && !t.glue[prev] {
			e.word1(w[start:p])
			start = p
		}
		i = p + len(metaspace)
	}
	e.word1(w[start:])
}

// metaspace is SentencePiece's space marker.
const (
	metaspace     = "\u2581"
	metaspaceRune = '\u2581'
)

// word1 appends the ids of one word, through the cache.
func (e *encoder) word1(w string) {
	t := e.t
	if e.over {
		return
	}
	if len(w) <= 1 || t.cache == nil || len(w) > maxCachedWord {
		// A word that could alone pass the limit (it has at most one
		// token per byte) is first judged by its least token count.
		if e.limit > 0 && len(w) > e.limit-len(e.ids) && len(e.ids)+t.minTokens(w) > e.limit {
			e.over = true
			return
		}
		e.ids = t.model.appendWord(e.ids, w)
		e.check()
		return
	}
	if ids, ok := t.cache.get(w); ok {
		e.ids = append(e.ids, ids...)
		e.check()
		return
	}
	n := len(e.ids)
	e.ids = t.model.appendWord(e.ids, w)
	t.cache.put(w, e.ids[n:])
	e.check()
}

// minTokens is a lower bound of the number of tokens of word w: every
// token BPE makes of w is a run of w's bytes, so none is longer than the
// longest vocabulary entry made only of bytes that occur in w. It scans
// the vocabulary (a millisecond or two for 150,000 tokens): EncodeLimit
// calls it only for a word that could alone pass its limit.
func (t *Tokenizer) minTokens(w string) int {
	if t.model.charLevel && t.model.hasUnk && !t.model.fullFallback() {
		return 1 // fuse_unk may make one token of any number of bytes
	}
	var in [256]bool
	for i := 0; i < len(w); i++ {
		in[w[i]] = true
	}
	longest := 1
	for id := range t.decoded.len() {
		s := t.decoded.at(id)
		if len(s) <= longest {
			continue
		}
		ok := true
		for i := 0; i < len(s); i++ {
			if !in[s[i]] {
				ok = false
				break
			}
		}
		if ok {
			longest = len(s)
		}
	}
	return (len(w) + longest - 1) / longest
}

func (t *Tokenizer) normalize(s string) string {
	if t.normASCII && isASCII(s) { // every normalization form leaves ASCII as it is
		return s
	}
	for i := range t.norm {
		s = t.norm[i].apply(s)
	}
	return s
}

// Decode turns ids back into text, special tokens included. Ids that do not
// exist are skipped. Bytes that do not form valid UTF-8 (a sequence cut in
// the middle of a character) become U+FFFD, as in HuggingFace's decoder.
func (t *Tokenizer) Decode(ids []uint32) string {
	if t.dec != nil {
		return t.decodeChain(ids)
	}
	n := 0
	nd := t.decoded.len()
	for _, id := range ids {
		if int(id) < nd {
			n += len(t.decoded.at(int(id)))
		}
	}
	buf := make([]byte, 0, n)
	for _, id := range ids {
		if int(id) < nd {
			buf = append(buf, t.decoded.at(int(id))...)
		}
	}
	return validUTF8(string(buf))
}

// TokenToID returns the id of a token as written in tokenizer.json: an added
// or special token's content ("<|im_end|>") or a vocabulary entry in its
// byte-level form ("Ġworld").
func (t *Tokenizer) TokenToID(token string) (uint32, bool) {
	if id, ok := t.addedByContent[token]; ok {
		return id, true
	}
	id, ok := t.vocab.get(token)
	return id, ok
}

// IDToToken returns the token of id as written in tokenizer.json.
func (t *Tokenizer) IDToToken(id uint32) (string, bool) {
	if int(id) >= t.idToken.len() || !t.known[id] {
		return "", false
	}
	return t.idToken.at(int(id)), true
}

// IsSpecial reports whether id is an added token flagged special (such as
// <|im_start|> or <|endoftext|>).
func (t *Tokenizer) IsSpecial(id uint32) bool { return t.special[id] }

// VocabSize returns the size of the id space: the largest id of the
// vocabulary and added tokens, plus one (151669 for Qwen3; the model's
// embedding table may be padded beyond it).
func (t *Tokenizer) VocabSize() int { return t.idToken.len() }

var (
	defaultOnce sync.Once
	defaultTok  *Tokenizer
	defaultErr  error
)

// Default returns the tokenizer of the embedded default model (Qwen3),
// loaded on first use and shared afterwards.
func Default() (*Tokenizer, error) {
	defaultOnce.Do(func() {
		b, err := qwen3files.TokenizerJSON()
		if err != nil {
			defaultErr = err
			return
		}
		defaultTok, defaultErr = LoadJSON(b)
	})
	return defaultTok, defaultErr
}

// isASCII reports whether s is all ASCII, eight bytes a step.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if (s[i]|s[i+1]|s[i+2]|s[i+3]|s[i+4]|s[i+5]|s[i+6]|s[i+7])&0x80 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// WithSpecialTokens returns a tokenizer that shares everything with t (its
// tables and caches) except the ids Encode adds around the text when asked
// for special tokens: prefix before, suffix after, in place of what
// tokenizer.json's post-processor says. Model loaders use it for
// transformers' add_bos_token / add_eos_token.
func (t *Tokenizer) WithSpecialTokens(prefix, suffix []uint32) *Tokenizer {
	c := *t
	c.prefix, c.suffix = slices.Clone(prefix), slices.Clone(suffix)
	c.hasTemplate = true
	return &c
}
