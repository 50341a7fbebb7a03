package tokenizer

import (
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// splitter cuts text into pieces with the "Isolated" behaviour: every match
// of the pattern is a piece and so is every stretch of text between two
// matches, so the pieces cover the text. appendEnds appends the byte offset
// where each piece of s ends, in increasing order (the last is len(s); an
// empty s has no pieces).
type splitter interface {
	appendEnds(dst []int, s string) []int
}

var (
	_ splitter = (*regexpSplitter)(nil)
	_ splitter = (*fastSplitter)(nil)
)

// regexpSplitter is the general splitter: regexp2 compiles the pattern as
// written in tokenizer.json, look-ahead included.
type regexpSplitter struct {
	re *regexp2.Regexp
}

func newRegexpSplitter(pattern string) (*regexpSplitter, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("compiling split pattern %q: %w", pattern, err)
	}
	return &regexpSplitter{re: re}, nil
}

func (r *regexpSplitter) appendEnds(dst []int, s string) []int {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	// regexp2 reports rune offsets; map them back to byte offsets.
	off := make([]int, len(runes)+1)
	b := 0
	for i, c := range runes {
		off[i] = b
		b += utf8.RuneLen(c)
	}
	off[len(runes)] = b
	prev := 0
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start, end := m.Index, m.Index+m.Length
		if end > start {
			if start > prev {
				dst = append(dst, off[start])
			}
			dst = append(dst, off[end])
			prev = end
		}
		m, err = r.re.FindNextMatch(m)
	}
	if prev < len(runes) {
		dst = append(dst, off[len(runes)])
	}
	return dst
}
