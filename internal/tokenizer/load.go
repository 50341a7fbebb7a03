package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

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
		return nil
	})
	if err != nil {
		return fmt.Errorf("merges: %w", err)
	}
	return nil
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
	// ByteLevel (absent booleans default to true, as in HuggingFace).
	AddPrefixSpace *bool `json:"add_prefix_space"`
	UseRegex       *bool `json:"use_regex"`
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
	if err := t.loadModel(f); err != nil {
		return nil, err
	}
	if err := t.loadNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := t.loadPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.loadPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if err := t.loadDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.loadAdded(f.vocab, f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) loadModel(f *fileJSON) error {
	m := &f.Model
	typ := m.Type
	if typ == "" && t.model.merges != nil && t.model.merges.len() > 0 {
		typ = "BPE" // untagged files: only BPE has merges
	}
	if typ != "BPE" {
		return fmt.Errorf("%w: model type %q (only byte-level BPE is implemented)", ErrUnsupported, m.Type)
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
	for c := 0; c < 256; c++ {
		tok := string(byteToRune[c])
		id, ok := f.vocab[tok]
		if !ok {
			return fmt.Errorf("%w: byte 0x%02x (%q) is missing from the vocab: not a byte-level BPE", ErrUnsupported, c, tok)
		}
		t.model.byteID[c] = id
	}
	t.model.ignoreMerges = m.IgnoreMerges
	if t.model.merges == nil {
		t.model.merges = newPairTable(0)
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

func (t *Tokenizer) loadNormalizer(b json.RawMessage) error {
	if isNull(b) {
		return nil
	}
	forms, err := normalizerForms(b)
	if err != nil {
		return err
	}
	t.normForms = forms
	return nil
}

func normalizerForms(b json.RawMessage) ([]norm.Form, error) {
	c, err := parseComponent(b, "normalizer")
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case "NFC":
		return []norm.Form{norm.NFC}, nil
	case "NFD":
		return []norm.Form{norm.NFD}, nil
	case "NFKC":
		return []norm.Form{norm.NFKC}, nil
	case "NFKD":
		return []norm.Form{norm.NFKD}, nil
	case "Sequence":
		var out []norm.Form
		for _, sub := range c.Normalizers {
			f, err := normalizerForms(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: normalizer %q", ErrUnsupported, c.Type)
}

func (t *Tokenizer) loadPreTokenizer(b json.RawMessage) error {
	if isNull(b) {
		return fmt.Errorf("%w: no pre_tokenizer (a byte-level BPE needs ByteLevel)", ErrUnsupported)
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
			if c.Behavior != "Isolated" || c.Invert {
				return fmt.Errorf("%w: Split behavior %q invert=%v (only Isolated)", ErrUnsupported, c.Behavior, c.Invert)
			}
			if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
				return fmt.Errorf("%w: Split needs exactly one of pattern.Regex or pattern.String", ErrInvalid)
			}
			var sp splitter
			if c.Pattern.Regex != nil {
				sp, err = splitterFor(*c.Pattern.Regex)
			} else {
				sp, err = newRegexpSplitter(regexp2.Escape(*c.Pattern.String))
			}
			if err != nil {
				return fmt.Errorf("%w: %v", ErrUnsupported, err)
			}
			stages = append(stages, stage{split: sp})
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
		return err
	}
	if !byteLevel {
		return fmt.Errorf("%w: pre_tokenizer has no ByteLevel step: not a byte-level BPE", ErrUnsupported)
	}
	t.stages = stages
	return nil
}

// splitterFor returns the fast splitter for the patterns it implements and
// regexp2 for the rest.
func splitterFor(pattern string) (splitter, error) {
	switch pattern {
	case qwenPattern:
		return &fastSplitter{maxDigits: 1}, nil
	case llama3Pattern:
		return &fastSplitter{maxDigits: 3}, nil
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

func (t *Tokenizer) loadDecoder(b json.RawMessage) error {
	if isNull(b) {
		return fmt.Errorf("%w: no decoder (a byte-level BPE needs the ByteLevel decoder)", ErrUnsupported)
	}
	c, err := parseComponent(b, "decoder")
	if err != nil {
		return err
	}
	if c.Type == "Sequence" && len(c.Decoders) == 1 {
		return t.loadDecoder(c.Decoders[0])
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("%w: decoder %q", ErrUnsupported, c.Type)
	}
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
		decoded[id], _ = byteLevelDecode(tok)
	}
	if t.idToken, err = newStringTable(idToken); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if t.decoded, err = newStringTable(decoded); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}
