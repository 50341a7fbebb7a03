package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text, leftmost-longest, the way
// HuggingFace's AddedVocabulary does with its Aho-Corasick automaton.
type addedMatcher struct {
	tokens []addedToken
	// trie finds the longest token at a position: Gemma 3 has 6,415 added
	// tokens, 6,000 of them starting with '<', too many to try in turn.
	trie byteTrie
	// isFirst marks the bytes some token starts with. When they are all
	// the same byte (Qwen's and Llama 3's added tokens all start with
	// '<'), only is that byte and split jumps between its occurrences with
	// strings.IndexByte instead of looking at every byte: a long prompt
	// without added tokens costs a vectorised scan.
	isFirst [256]bool
	only    int // the single first byte, or -1
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{}
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		m.tokens = append(m.tokens, t)
	}
	m.only = -1
	firsts := 0
	for i, t := range m.tokens {
		c := t.Content[0]
		m.trie.insert(t.Content, int32(i))
		if !m.isFirst[c] {
			m.isFirst[c] = true
			firsts++
			m.only = int(c)
		}
	}
	if firsts != 1 {
		m.only = -1
	}
	m.trie.freeze()
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// split cuts s into text segments and added tokens, calling text for each
// non-empty stretch of ordinary text and token for each added token, in
// order. lstrip/rstrip tokens absorb the white space beside them;
// single_word tokens only match between non-word characters. When stop is
// not nil, split returns as soon as *stop is true after a call.
func (m *addedMatcher) split(s string, text func(seg string), token func(id uint32), stop *bool) {
	if m.empty() {
		if s != "" {
			text(s)
		}
		return
	}
	emitted := 0 // s[:emitted] has been handed out
	for i := 0; i < len(s); {
		if !m.isFirst[s[i]] { // skip to the next byte a token may start at
			if m.only >= 0 {
				j := strings.IndexByte(s[i:], byte(m.only))
				if j < 0 {
					break
				}
				i += j
			} else {
				for i < len(s) && !m.isFirst[s[i]] {
					i++
				}
				if i == len(s) {
					break
				}
			}
		}
		hit := m.trie.longest(s[i:])
		if hit < 0 {
			i++
			continue
		}
		t := &m.tokens[hit]
		start, end := i, i+len(t.Content)
		if t.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			i = end
			continue
		}
		if t.LStrip {
			start = max(trimRightSpaceLen(s[:start]), emitted)
		}
		if t.RStrip {
			end += leadingSpaceLen(s[end:])
		}
		if start > emitted {
			text(s[emitted:start])
		}
		token(t.ID)
		emitted = end
		i = end
		if stop != nil && *stop {
			return
		}
	}
	if emitted < len(s) {
		text(s[emitted:])
	}
}

// isWordRune reports whether r is matched by a Unicode \w.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r) || unicode.Is(unicode.Pc, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// trimRightSpaceLen returns the length of s without its trailing white space.
func trimRightSpaceLen(s string) int {
	for len(s) > 0 {
		r, n := utf8.DecodeLastRuneInString(s)
		if !unicode.IsSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return len(s)
}

// leadingSpaceLen returns the length of s's leading white space.
func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, sz := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += sz
	}
	return n
}

// byteTrie is a trie over the bytes of the added tokens, held in flat,
// pointer-free arrays (Gemma 3's 6,415 added tokens make some 50,000
// nodes, which as separate objects the garbage collector would re-mark
// every cycle). Tokens with the same content keep the first one's index
// (the file's first). Built with insert, then freeze; read with longest.
type byteTrie struct {
	// building: children by byte, per node, until freeze.
	build []map[byte]int32
	// frozen: node n's children are edges[first[n]:first[n+1]], sorted by
	// byte; tok[n] is the token ending at n, or -1.
	first []int32
	edges []trieEdge
	tok   []int32
}

type trieEdge struct {
	b     byte
	child int32
}

func (t *byteTrie) insert(s string, tok int32) {
	if len(t.build) == 0 {
		t.build = append(t.build, nil)
		t.tok = append(t.tok, -1)
	}
	n := int32(0)
	for i := 0; i < len(s); i++ {
		next, ok := t.build[n][s[i]]
		if !ok {
			next = int32(len(t.build))
			if t.build[n] == nil {
				t.build[n] = make(map[byte]int32)
			}
			t.build[n][s[i]] = next
			t.build = append(t.build, nil)
			t.tok = append(t.tok, -1)
		}
		n = next
	}
	if t.tok[n] < 0 {
		t.tok[n] = tok
	}
}

// freeze turns the building maps into the flat arrays.
func (t *byteTrie) freeze() {
	t.first = make([]int32, len(t.build)+1)
	for n, kids := range t.build {
		t.first[n] = int32(len(t.edges))
		start := len(t.edges)
		for b, child := range kids {
			t.edges = append(t.edges, trieEdge{b, child})
		}
		sort.Slice(t.edges[start:], func(i, j int) bool { return t.edges[start+i].b < t.edges[start+j].b })
	}
	t.first[len(t.build)] = int32(len(t.edges))
	t.build = nil
}

// longest returns the index of the longest token that s starts with, or -1.
func (t *byteTrie) longest(s string) int {
	best := -1
	if len(t.tok) == 0 {
		return best
	}
	n := int32(0)
	for i := 0; i < len(s); i++ {
		kids := t.edges[t.first[n]:t.first[n+1]]
		next := int32(-1)
		for _, e := range kids {
			if e.b >= s[i] {
				if e.b == s[i] {
					next = e.child
				}
				break
			}
		}
		if next < 0 {
			break
		}
		n = next
		if tk := t.tok[n]; tk >= 0 {
			best = int(tk)
		}
	}
	return best
}
