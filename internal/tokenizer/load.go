package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2"

	"golang.org/x/text/unicode/norm"
)

// ErrUnsupported is returned by Load for a tokenizer.json that this package
// cannot reproduce exactly (a WordPiece, Unigram or WordLevel model, an
// unknown normalizer, pre-tokenizer, post-processor or decoder, BPE dropout,
// …). It is refused rather than tokenized approximately.
var ErrUnsupported = errors.New("unsupported tokenizer")

// ErrInvalid is returned by Load for a tokenizer.json that is malformed or
// inconsistent (bad JSON, a merge naming a token missing from the vocabulary,
// a byte missing from the byte-level alphabet, …).
var ErrInvalid = errors.New("invalid tokenizer.json")

// Config tunes a loaded tokenizer; it does not change which ids come out.
type Config struct {
	// CacheWords is roughly how many distinct words (pre-tokenized pieces of
	// at most 256 bytes) keep their ids in memory. 0 disables the cache.
	// Default 65536 (a few MB).
	CacheWords int
	// SegmentCacheBytes is the memory budget (bytes of text plus ids) for
	// remembering the ids of stretches of text of at least 256 bytes between
	// added tokens, such as whole chat messages, so that the history a
	// multi-turn conversation re-sends is not tokenized again. 0 disables
	// it. Default 32 MiB.
	SegmentCacheBytes int
}

// DefaultConfig returns the configuration Load and LoadJSON use.
func DefaultConfig() Config { return Config{CacheWords: 1 << 16, SegmentCacheBytes: 32 << 20} }

// Validate reports a configuration that cannot be used.
func (c Config) Validate() error {
	if c.CacheWords < 0 {
		return fmt.Errorf("tokenizer: CacheWords must be >= 0, got %d", c.CacheWords)
	}
	if c.SegmentCacheBytes < 0 {
		return fmt.Errorf("tokenizer: SegmentCacheBytes must be >= 0, got %d", c.SegmentCacheBytes)
	}
	return nil
}

// maxFileSize bounds what Load reads: the largest real tokenizer.json files
// are around 30 MB.
const maxFileSize = 256 << 20

// Load reads a HuggingFace tokenizer.json from r (at most 256 MB) and builds
// its tokenizer with DefaultConfig.
func Load(r io.Reader) (*Tokenizer, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading tokenizer.json: %w", err)
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, maxFileSize)
	}
	return LoadJSON(b)
}

// LoadJSON builds a tokenizer from the bytes of a tokenizer.json with
// DefaultConfig.
func LoadJSON(b []byte) (*Tokenizer, error) { return LoadJSONConfig(b, DefaultConfig()) }

// fileJSON is the part of tokenizer.json's schema this package reads.
type fileJSON struct {
	AddedTokens   []addedToken
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
	Model         modelJSON
	// vocab is the model's vocabulary (token in byte-level form → id),
	// needed while loading only: the tokenizer keeps a frozenMap.
	vocab map[string]uint32
}

// modelJSON is tokenizer.json's "model" section.
type modelJSON struct {
	Type                    string   `json:"type"`
	Dropout                 *float64 `json:"dropout"`
	UnkToken                *string  `json:"unk_token"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	ByteFallback            bool     `json:"byte_fallback"`
	FuseUnk                 bool     `json:"fuse_unk"`
}

// parseFile reads tokenizer.json. The vocabulary and merges (nearly all of
// the file's bytes) are scanned once, by hand, in place; the small sections
// go through encoding/json. Merges are resolved to ids as they are read.
func (t *Tokenizer) parseFile(b []byte) (*fileJSON, error) {
	f := &fileJSON{}
	var vocab map[string]uint32
	var pendingMerges []byte // merges met before the vocab
	haveModel := false
	s := &scanner{b: b}
	top, err := s.object(func(key string) (bool, error) {
		if key != "model" {
			return false, nil
		}
		haveModel = true
		if s.peek() == 'n' { // null
			return false, nil
		}
		mo, err := s.object(func(key string) (bool, error) {
			switch key {
			case "vocab":
				v, err := parseVocab(s)
				if err != nil {
					return false, fmt.Errorf("vocab: %w", err)
				}
				vocab = v
				f.vocab = v
				return true, nil
			case "merges":
				if vocab == nil {
					return false, nil
				}
				return true, t.readMerges(s, vocab)
			}
			return false, nil
		})
		if err != nil {
			return false, fmt.Errorf("model: %w", err)
		}
		pendingMerges = mo["merges"]
		delete(mo, "merges")
		delete(mo, "vocab")
		rest := make(map[string]json.RawMessage, len(mo))
		for k, v := range mo {
			rest[k] = v
		}
		small, err := json.Marshal(rest)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(small, &f.Model); err != nil {
			return false, fmt.Errorf("model: %w", err)
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	if err := s.end(); err != nil {
		return nil, err
	}
	if !haveModel || vocab == nil {
		return nil, errors.New("no model vocab")
	}
	if !isNull(pendingMerges) {
		if err := t.readMerges(&scanner{b: pendingMerges}, vocab); err != nil {
			return nil, err
		}
	}
	f.Normalizer = top["normalizer"]
	f.PreTokenizer = top["pre_tokenizer"]
	f.PostProcessor = top["post_processor"]
	f.Decoder = top["decoder"]
	if raw, ok := top["added_tokens"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &f.AddedTokens); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	return f, nil
}

// readMerges reads the merges at the scanner's position into the rank table.
func (t *Tokenizer) readMerges(s *scanner, vocab map[string]uint32) error {
	t.model.merges = newPairTable(len(vocab))
	var joined []byte
	err := parseMerges(s, func(rank int, left, right []byte) error {
		a, okA := vocab[string(left)]
		bb, okB := vocab[string(right)]
		joined = append(append(joined[:0], left...), right...)
		id, okM := vocab[string(joined)]
		if !okA || !okB || !okM {
			return fmt.Errorf("merge %d (%q %q) uses a token missing from the vocab", rank+1, left, right)
		}
		if rank >= math.MaxUint32 {
			return errors.New("too many merges")
		}
		t.model.merges.set(uint64(a)<<32|uint64(bb), uint64(rank)<<32|uint64(id))
		t.noteGlue(joined)
		return nil
	})
	if err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	return nil
}

// noteGlue records in t.glue each character that merged token tok joins to
// a following "▁" (a run of "▁" counts as one).
func (t *Tokenizer) noteGlue(tok []byte) {
	for i := 1; i < len(tok); {
		j := bytes.Index(tok[i:], []byte(metaspace))
		if j < 0 {
			return
		}
		p := i + j
		if prev, _ := utf8.DecodeLastRune(tok[:p]); prev != metaspaceRune {
			if t.glue == nil {
				t.glue = make(map[rune]bool)
			}
			t.glue[prev] = true
		}
		i = p + len(metaspace)
	}
}

// component is the common shape of normalizers, pre-tokenizers,
// post-processors and decoders: a type tag plus type-specific fields.
type component struct {
	Type string `json:"type"`
	// Sequence members (normalizers, pretokenizers, processors, decoders).
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	Decoders      []json.RawMessage `json:"decoders"`
	// Split.
	Pattern *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel (absent booleans default to true, as in HuggingFace);
	// Metaspace's legacy add_prefix_space.
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
	// Replace (normalizer and decoder), Prepend, Strip (decoder).
	Content json.RawMessage `json:"content"`
	Prepend *string         `json:"prepend"`
	Start   int             `json:"start"`
	Stop    int             `json:"stop"`
	// Metaspace.
	Replacement   *string `json:"replacement"`
	PrependScheme *string `json:"prepend_scheme"`
	Split         *bool   `json:"split"`
	// Digits.
	IndividualDigits bool `json:"individual_digits"`
	// TemplateProcessing.
	Single        []map[string]json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

func isNull(b json.RawMessage) bool {
	s := strings.TrimSpace(string(b))
	return s == "" || s == "null"
}

func parseComponent(b json.RawMessage, what string) (*component, error) {
	var c component
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, what, err)
	}
	return &c, nil
}

// gpt2Pattern is the ByteLevel pre-tokenizer's own regex (use_regex).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// LoadJSONConfig builds a tokenizer from the bytes of a tokenizer.json.
func LoadJSONConfig(b []byte, cfg Config) (*Tokenizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Tokenizer{cache: newWordCache(cfg.CacheWords), segments: newSegmentCache(cfg.SegmentCacheBytes)}
	f, err := t.parseFile(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	byteLevel, err := t.loadPreTokenizer(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if err := t.loadModel(f, byteLevel); err != nil {
		return nil, err
	}
	if err := t.loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.loadDecoder(f.Decoder, byteLevel); err != nil {
		return nil, err
	}
	if err := t.loadAdded(f.vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadModel(f *fileJSON, byteLevel bool) error {
	m := &f.Model
	typ := m.Type
	if typ == "" && t.model.merges != nil && t.model.merges.len() > 0 {
		typ = "BPE" // untagged files: only BPE has merges
	}
	if typ != "BPE" {
		return fmt.Errorf("%w: model type %q (only BPE is implemented)", ErrUnsupported, m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return fmt.Errorf("%w: BPE dropout %v (non-deterministic)", ErrUnsupported, *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return fmt.Errorf("%w: continuing_subword_prefix %q", ErrUnsupported, *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return fmt.Errorf("%w: end_of_word_suffix %q", ErrUnsupported, *m.EndOfWordSuffix)
	}
	t.model.ignoreMerges = m.IgnoreMerges
	if t.model.merges == nil {
		t.model.merges = newPairTable(0)
	}
	if !byteLevel {
		return t.loadCharModel(f)
	}
	if m.ByteFallback {
		return fmt.Errorf("%w: byte_fallback in a byte-level BPE", ErrUnsupported)
	}
	for c := 0; c < 256; c++ {
		tok := string(byteToRune[c])
		id, ok := f.vocab[tok]
		if !ok {
			return fmt.Errorf("%w: byte 0x%02x (%q) is missing from the vocab: not a byte-level BPE", ErrUnsupported, c, tok)
		}
		t.model.byteID[c] = id
	}
	if t.model.ignoreMerges {
		raws := make(map[string]uint32, len(f.vocab))
		for tok, id := range f.vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				raws[raw] = id
			}
		}
		var err error
		if t.model.vocab, err = newFrozenMap(raws); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return nil
}

// loadCharModel sets up a SentencePiece-style BPE (no ByteLevel step):
// symbols are characters, with byte_fallback and unk_token for the others.
func (t *Tokenizer) loadCharModel(f *fileJSON) error {
	m := &t.model
	m.charLevel = true
	m.byteFallback = f.Model.ByteFallback
	m.fuseUnk = f.Model.FuseUnk
	for i := range m.asciiID {
		m.asciiID[i] = noID
	}
	for i := range m.fallback {
		m.fallback[i] = noID
	}
	m.runeID = make(map[rune]uint32)
	for tok, id := range f.vocab {
		r, n := utf8.DecodeRuneInString(tok)
		if n == len(tok) && r != utf8.RuneError {
			if r < utf8.RuneSelf {
				m.asciiID[r] = id
			} else {
				m.runeID[r] = id
			}
		}
		if b, ok := byteToken(tok); ok && tok == fmt.Sprintf("<0x%02X>", b) {
			m.fallback[b] = id
		}
	}
	if u := f.Model.UnkToken; u != nil {
		id, ok := f.vocab[*u]
		if !ok {
			return fmt.Errorf("%w: unk_token %q is not in the vocab", ErrInvalid, *u)
		}
		m.unk, m.hasUnk = id, true
	}
	if m.ignoreMerges {
		var err error
		if m.vocab, err = newFrozenMap(f.vocab); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	_, spaceToken := m.runeID[metaspaceRune]
	t.chunkWords = !m.ignoreMerges && spaceToken
	return nil
}

func (t *Tokenizer) loadNormalizer(b json.RawMessage) error {
	if isNull(b) {
		return nil
	}
	steps, err := normalizerSteps(b)
	if err != nil {
		return err
	}
	t.norm = steps
	t.normASCII = onlyForms(steps)
	return nil
}

var normForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

func normalizerSteps(b json.RawMessage) ([]normStep, error) {
	c, err := parseComponent(b, "normalizer")
	if err != nil {
		return nil, err
	}
	if f, ok := normForms[c.Type]; ok {
		return []normStep{{form: &f}}, nil
	}
	switch c.Type {
	case "Sequence":
		var out []normStep
		for _, sub := range c.Normalizers {
			f, err := normalizerSteps(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	case "Replace":
		st, err := replaceStep(c, "normalizer")
		if err != nil {
			return nil, err
		}
		return []normStep{st}, nil
	case "Prepend":
		if c.Prepend == nil {
			return nil, fmt.Errorf("%w: Prepend normalizer without prepend", ErrInvalid)
		}
		if *c.Prepend == "" {
			return nil, nil
		}
		return []normStep{{prepend: *c.Prepend}}, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, c.Type)
}

// replaceStep reads a Replace normalizer's pattern and content.
func replaceStep(c *component, what string) (normStep, error) {
	var st normStep
	if err := json.Unmarshal(c.Content, &st.to); err != nil {
		return st, fmt.Errorf("%w: %s Replace content: %v", ErrInvalid, what, err)
	}
	switch {
	case c.Pattern != nil && c.Pattern.String != nil && c.Pattern.Regex == nil:
		st.from = *c.Pattern.String
		if st.from == "" {
			return st, fmt.Errorf("%w: %s Replace with an empty pattern", ErrUnsupported, what)
		}
	case c.Pattern != nil && c.Pattern.Regex != nil && c.Pattern.String == nil:
		re, err := regexp2.Compile(*c.Pattern.Regex, regexp2.Unicode)
		if err != nil {
			return st, fmt.Errorf("%w: %s Replace pattern %q: %v", ErrUnsupported, what, *c.Pattern.Regex, err)
		}
		st.re = re
	default:
		return st, fmt.Errorf("%w: %s Replace needs exactly one of pattern.Regex or pattern.String", ErrInvalid, what)
	}
	return st, nil
}

// loadPreTokenizer builds the pre-tokenizer stages and reports whether
// the pipeline ends in ByteLevel (a byte-level BPE); without ByteLevel the
// model is SentencePiece-style, on characters.
func (t *Tokenizer) loadPreTokenizer(b json.RawMessage) (bool, error) {
	if isNull(b) {
		return false, nil
	}
	var stages []stage
	byteLevel := false
	var walk func(b json.RawMessage) error
	walk = func(b json.RawMessage) error {
		c, err := parseComponent(b, "pre_tokenizer")
		if err != nil {
			return err
		}
		if byteLevel && c.Type != "Sequence" {
			return fmt.Errorf("%w: pre-tokenizer %q after ByteLevel", ErrUnsupported, c.Type)
		}
		switch c.Type {
		case "Sequence":
			for _, sub := range c.Pretokenizers {
				if err := walk(sub); err != nil {
					return err
				}
			}
			return nil
		case "Split":
			st, err := splitStage(c)
			if err != nil {
				return err
			}
			stages = append(stages, st)
			return nil
		case "Metaspace":
			st, err := metaspaceStage(c)
			if err != nil {
				return err
			}
			if st.prepend == prependFirst {
				t.startSensitive = true
			}
			stages = append(stages, st)
			return nil
		case "Digits":
			stages = append(stages, stage{kind: stageDigits, individual: c.IndividualDigits})
			return nil
		case "ByteLevel":
			byteLevel = true
			st := stage{prefixSpace: c.AddPrefixSpace == nil || *c.AddPrefixSpace}
			if c.UseRegex == nil || *c.UseRegex {
				if st.split, err = splitterFor(gpt2Pattern); err != nil {
					return err
				}
			}
			if st.prefixSpace || st.split != nil {
				stages = append(stages, st)
			}
			return nil
		}
		return fmt.Errorf("%w: pre-tokenizer %q", ErrUnsupported, c.Type)
	}
	if err := walk(b); err != nil {
		return false, err
	}
	t.stages = stages
	return byteLevel, nil
}

// splitStage builds a Split pre-tokenizer.
func splitStage(c *component) (stage, error) {
	behavior, ok := behaviors[c.Behavior]
	if !ok {
		return stage{}, fmt.Errorf("%w: Split behavior %q", ErrUnsupported, c.Behavior)
	}
	if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
		return stage{}, fmt.Errorf("%w: Split needs exactly one of pattern.Regex or pattern.String", ErrInvalid)
	}
	if behavior == behaviorIsolated && !c.Invert {
		var sp splitter
		var err error
		if c.Pattern.Regex != nil {
			sp, err = splitterFor(*c.Pattern.Regex)
		} else {
			sp, err = newRegexpSplitter(regexp2.Escape(*c.Pattern.String))
		}
		if err != nil {
			return stage{}, fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return stage{split: sp}, nil
	}
	st := stage{kind: stageSpans, behavior: behavior, invert: c.Invert}
	if c.Pattern.String != nil {
		st.match = stringMatcher(*c.Pattern.String)
		return st, nil
	}
	re, err := newRegexpSplitter(*c.Pattern.Regex)
	if err != nil {
		return stage{}, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	st.match = re
	return st, nil
}

// metaspaceStage builds a Metaspace pre-tokenizer (prepend_scheme, or the
// legacy add_prefix_space: true is "always").
func metaspaceStage(c *component) (stage, error) {
	st := stage{kind: stageMetaspace, replacement: "\u2581", prepend: prependAlways, splitMeta: true}
	if c.Replacement != nil {
		if utf8.RuneCountInString(*c.Replacement) != 1 {
			return stage{}, fmt.Errorf("%w: Metaspace replacement %q is not one character", ErrInvalid, *c.Replacement)
		}
		st.replacement = *c.Replacement
	}
	if c.Split != nil {
		st.splitMeta = *c.Split
	}
	switch {
	case c.PrependScheme != nil:
		switch *c.PrependScheme {
		case "always":
		case "first":
			st.prepend = prependFirst
		case "never":
			st.prepend = prependNever
		default:
			return stage{}, fmt.Errorf("%w: Metaspace prepend_scheme %q", ErrUnsupported, *c.PrependScheme)
		}
	case c.AddPrefixSpace != nil && !*c.AddPrefixSpace:
		st.prepend = prependNever
	}
	return st, nil
}

// splitterFor returns the fast splitter for the patterns it implements and
// regexp2 for the rest.
func splitterFor(pattern string) (splitter, error) {
	switch pattern {
	case qwenPattern:
		return &fastSplitter{maxDigits: 1}, nil
	case llama3Pattern:
		return &fastSplitter{maxDigits: 3}, nil
	case deepseekDigits:
		return digitGroupSplitter{}, nil
	case deepseekCJK:
		return cjkSplitter{}, nil
	case deepseekWords:
		return deepseekWordSplitter{}, nil
	case o200kPattern:
		return o200kSplitter{}, nil
	}
	return newRegexpSplitter(pattern)
}

func (t *Tokenizer) loadPostProcessor(b json.RawMessage) error {
	if isNull(b) {
		return nil
	}
	c, err := parseComponent(b, "post_processor")
	if err != nil {
		return err
	}
	switch c.Type {
	case "ByteLevel":
		return nil // only adjusts offsets
	case "Sequence":
		for _, sub := range c.Processors {
			if err := t.loadPostProcessor(sub); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		if t.hasTemplate {
			return fmt.Errorf("%w: two TemplateProcessing post-processors", ErrUnsupported)
		}
		t.hasTemplate = true
		seenSeq := false
		for _, item := range c.Single {
			if raw, ok := item["Sequence"]; ok {
				var s struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(raw, &s); err != nil || s.ID != "A" || seenSeq {
					return fmt.Errorf("%w: TemplateProcessing single template must hold sequence A once", ErrUnsupported)
				}
				seenSeq = true
				continue
			}
			raw, ok := item["SpecialToken"]
			if !ok {
				return fmt.Errorf("%w: TemplateProcessing item %v", ErrUnsupported, item)
			}
			var s struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				return fmt.Errorf("%w: TemplateProcessing special token: %v", ErrInvalid, err)
			}
			st, ok := c.SpecialTokens[s.ID]
			if !ok {
				return fmt.Errorf("%w: TemplateProcessing names unknown special token %q", ErrInvalid, s.ID)
			}
			if seenSeq {
				t.suffix = append(t.suffix, st.IDs...)
			} else {
				t.prefix = append(t.prefix, st.IDs...)
			}
		}
		if !seenSeq {
			return fmt.Errorf("%w: TemplateProcessing single template without sequence A", ErrInvalid)
		}
		return nil
	}
	return fmt.Errorf("%w: post-processor %q", ErrUnsupported, c.Type)
}

// loadDecoder reads the decoder. A ByteLevel decoder alone (or in a
// one-step Sequence) is served by the precomputed decoded table; any other
// supported chain by decodeChain.
func (t *Tokenizer) loadDecoder(b json.RawMessage, byteLevel bool) error {
	if isNull(b) {
		if byteLevel {
			return fmt.Errorf("%w: no decoder (a byte-level BPE needs the ByteLevel decoder)", ErrUnsupported)
		}
		t.dec = []decStep{}
		return nil
	}
	var steps []decStep
	var walk func(b json.RawMessage) error
	walk = func(b json.RawMessage) error {
		c, err := parseComponent(b, "decoder")
		if err != nil {
			return err
		}
		switch c.Type {
		case "Sequence":
			for _, sub := range c.Decoders {
				if err := walk(sub); err != nil {
					return err
				}
			}
		case "ByteLevel":
			steps = append(steps, decStep{kind: decByteLevel})
		case "Replace":
			st, err := replaceStep(c, "decoder")
			if err != nil {
				return err
			}
			if st.re != nil {
				return fmt.Errorf("%w: decoder Replace with a Regex pattern", ErrUnsupported)
			}
			steps = append(steps, decStep{kind: decReplace, from: st.from, to: st.to})
		case "ByteFallback":
			steps = append(steps, decStep{kind: decByteFallback})
		case "Fuse":
			steps = append(steps, decStep{kind: decFuse})
		case "Strip":
			var content string
			if err := json.Unmarshal(c.Content, &content); err != nil || utf8.RuneCountInString(content) != 1 {
				return fmt.Errorf("%w: Strip decoder content must be one character", ErrInvalid)
			}
			r, _ := utf8.DecodeRuneInString(content)
			steps = append(steps, decStep{kind: decStrip, content: r, start: max(c.Start, 0), stop: max(c.Stop, 0)})
		case "Metaspace":
			ms, err := metaspaceStage(c)
			if err != nil {
				return err
			}
			r, _ := utf8.DecodeRuneInString(ms.replacement)
			steps = append(steps, decStep{kind: decMetaspace, replacement: r, prepend: ms.prepend != prependNever})
		default:
			return fmt.Errorf("%w: decoder %q", ErrUnsupported, c.Type)
		}
		return nil
	}
	if err := walk(b); err != nil {
		return err
	}
	if byteLevel {
		if len(steps) != 1 || steps[0].kind != decByteLevel {
			return fmt.Errorf("%w: a byte-level BPE's decoder must be ByteLevel alone", ErrUnsupported)
		}
		return nil
	}
	t.dec = steps
	return nil
}

// maxTokenID bounds token ids: real vocabularies stay well below a million.
const maxTokenID = 1<<24 - 1

// loadAdded registers the added tokens and builds the id tables.
func (t *Tokenizer) loadAdded(vocab map[string]uint32, added []addedToken) error {
	maxID := uint32(0)
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	for _, a := range added {
		maxID = max(maxID, a.ID)
	}
	// The id tables are dense arrays: refuse ids far beyond the number of
	// tokens, so that a small file cannot demand gigabytes.
	if limit := min(maxTokenID, 4*(len(vocab)+len(added))+1024); int(maxID) > limit {
		return fmt.Errorf("%w: token id %d too large for %d tokens", ErrInvalid, maxID, len(vocab)+len(added))
	}
	var err error
	if t.vocab, err = newFrozenMap(vocab); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	idToken := make([]string, int(maxID)+1)
	t.known = make([]bool, int(maxID)+1)
	for tok, id := range vocab {
		idToken[id] = tok
		t.known[id] = true
	}
	t.special = make(map[uint32]bool)
	t.addedByContent = make(map[string]uint32, len(added))
	var raw, normed []addedToken
	for _, a := range added {
		idToken[a.ID] = a.Content
		t.known[a.ID] = true
		t.addedByContent[a.Content] = a.ID
		if a.Special {
			t.special[a.ID] = true
		}
		if a.Normalized {
			// Matched after normalisation, in a second pass over what the
			// first (non-normalized tokens on raw text) left, as HuggingFace
			// does even when there is no normalizer.
			a.Content = t.normalize(a.Content)
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
	}
	t.addedRaw = newAddedMatcher(raw)
	t.addedNorm = newAddedMatcher(normed)
	decoded := make([]string, len(idToken))
	for id, tok := range idToken {
		switch {
		case !t.model.charLevel:
			decoded[id], _ = byteLevelDecode(tok)
		default:
			// pieces: the token as the model sees it (minTokens).
			if b, ok := byteToken(tok); ok && t.model.fallback[b] == uint32(id) {
				tok = string([]byte{b})
			}
			decoded[id] = tok
		}
	}
	if t.idToken, err = newStringTable(idToken); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if t.decoded, err = newStringTable(decoded); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}
