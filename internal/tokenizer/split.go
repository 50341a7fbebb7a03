package tokenizer

import (
	"fmt"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// splitter cuts text into pieces with the "Isolated" behaviour: every match
// of the pattern is a piece and so is every stretch of text between two
// matches. emit is called with byte ranges [start, end) of s, in order, and
// never with an empty range.
type splitter interface {
	split(s string, emit func(start, end int))
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

func (r *regexpSplitter) split(s string, emit func(start, end int)) {
	if s == "" {
		return
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
				emit(off[prev], off[start])
			}
			emit(off[start], off[end])
			prev = end
		}
		m, err = r.re.FindNextMatch(m)
	}
	if prev < len(runes) {
		emit(off[prev], off[len(runes)])
	}
}
