package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normStep is one normalizer of the pipeline: a Unicode normalization form,
// a Replace (literal or regex) or a Prepend.
type normStep struct {
	form    *norm.Form
	from    string          // Replace with a String pattern
	re      *regexp2.Regexp // Replace with a Regex pattern
	to      string          // Replace's content
	prepend string          // Prepend (applied to non-empty text only)
}

// onlyForms reports whether every step is a normalization form, which
// leaves ASCII text as it is.
func onlyForms(steps []normStep) bool {
	for _, s := range steps {
		if s.form == nil {
			return false
		}
	}
	return true
}

func (s *normStep) apply(text string) string {
	switch {
	case s.form != nil:
		return s.form.String(text)
	case s.prepend != "":
		if text == "" {
			return text
		}
		return s.prepend + text
	case s.re != nil:
		out, err := s.re.ReplaceFunc(text, func(regexp2.Match) string { return s.to }, -1, -1)
		if err != nil { // a match timeout; none is set
			return text
		}
		return out
	case s.from != "":
		return strings.ReplaceAll(text, s.from, s.to)
	}
	return text
}

// Stage kinds besides ByteLevel/Isolated splits (stage.split).
const (
	stagePlain     = iota // prefixSpace and/or split (Split Isolated, ByteLevel)
	stageSpans            // a Split with another behaviour or invert
	stageMetaspace        // Metaspace
	stageDigits           // Digits
)

// Split behaviours (HuggingFace's SplitDelimiterBehavior).
const (
	behaviorIsolated = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviors = map[string]int{
	"Isolated": behaviorIsolated, "Removed": behaviorRemoved,
	"MergedWithPrevious": behaviorMergedWithPrevious, "MergedWithNext": behaviorMergedWithNext,
	"Contiguous": behaviorContiguous,
}

// matcher finds the matches of a Split pattern: appendMatches appends
// start, end pairs of the non-empty matches in s, in order.
type matcher interface {
	appendMatches(dst []int, s string) []int
}

var (
	_ matcher = (*regexpSplitter)(nil)
	_ matcher = stringMatcher("")
)

// stringMatcher matches a literal (a Split's pattern.String).
type stringMatcher string

func (p stringMatcher) appendMatches(dst []int, s string) []int {
	if p == "" {
		return dst
	}
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], string(p))
		if j < 0 {
			break
		}
		dst = append(dst, i+j, i+j+len(p))
		i += j + len(p)
	}
	return dst
}

func (r *regexpSplitter) appendMatches(dst []int, s string) []int {
	if s == "" {
		return dst
	}
	runes := []rune(s)
	off := make([]int, len(runes)+1)
	b := 0
	for i, c := range runes {
		off[i] = b
		b += utf8.RuneLen(c)
	}
	off[len(runes)] = b
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Length > 0 {
			dst = append(dst, off[m.Index], off[m.Index+m.Length])
		}
		m, err = r.re.FindNextMatch(m)
	}
	return dst
}

// piece is a span of a pre-tokenized string kept as a word; HuggingFace's
// split marks the removed ones, which never reach the model.
type piece struct{ start, end int }

// appendSpans turns matches (start, end pairs) in a text of length n into
// the pieces HuggingFace's NormalizedString::split keeps for behavior:
// the matches and the gaps between them cover the text; invert swaps
// which are matches; empty pieces are dropped.
func appendSpans(dst []piece, matches []int, n int, behavior int, invert bool) []piece {
	type rng struct {
		start, end int
		match      bool
	}
	var ranges []rng
	prev := 0
	for i := 0; i+1 < len(matches); i += 2 {
		if matches[i] > prev {
			ranges = append(ranges, rng{prev, matches[i], invert})
		}
		ranges = append(ranges, rng{matches[i], matches[i+1], !invert})
		prev = matches[i+1]
	}
	if prev < n {
		ranges = append(ranges, rng{prev, n, invert})
	}
	type out struct {
		start, end int
		removed    bool
	}
	var res []out
	switch behavior {
	case behaviorIsolated:
		for _, r := range ranges {
			res = append(res, out{r.start, r.end, false})
		}
	case behaviorRemoved:
		for _, r := range ranges {
			res = append(res, out{r.start, r.end, r.match})
		}
	case behaviorContiguous:
		prevMatch := false
		for _, r := range ranges {
			if r.match == prevMatch && len(res) > 0 {
				res[len(res)-1].end = r.end
			} else {
				res = append(res, out{r.start, r.end, false})
			}
			prevMatch = r.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, r := range ranges {
			if r.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].end = r.end
			} else {
				res = append(res, out{r.start, r.end, false})
			}
			prevMatch = r.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(ranges) - 1; i >= 0; i-- {
			r := ranges[i]
			if r.match && !prevMatch && len(res) > 0 {
				res[len(res)-1].start = r.start
			} else {
				res = append(res, out{r.start, r.end, false})
			}
			prevMatch = r.match
		}
		for i, j := 0, len(res)-1; i < j; i, j = i+1, j-1 {
			res[i], res[j] = res[j], res[i]
		}
	}
	for _, r := range res {
		if !r.removed && r.end > r.start {
			dst = append(dst, piece{r.start, r.end})
		}
	}
	return dst
}

// Metaspace prepend schemes.
const (
	prependAlways = iota
	prependFirst
	prependNever
)

// metaspace is HuggingFace's Metaspace pre-tokenizer: spaces become the
// replacement character, which is prepended (always, or only to the text's
// first piece, or never) unless already there; with split, the text is
// cut before each replacement character.
func (st *stage) metaspace(s string, atStart bool) string {
	s = strings.ReplaceAll(s, " ", st.replacement)
	switch st.prepend {
	case prependAlways:
		if !strings.HasPrefix(s, st.replacement) {
			s = st.replacement + s
		}
	case prependFirst:
		if atStart && !strings.HasPrefix(s, st.replacement) {
			s = st.replacement + s
		}
	}
	return s
}

// appendDigitSpans appends the pieces of HuggingFace's Digits
// pre-tokenizer: each numeric character alone (individual) or runs of them
// (Contiguous), and the text between as pieces.
func appendDigitSpans(dst []piece, s string, individual bool) []piece {
	start := 0
	inDigits := false
	for i, r := range s {
		d := unicode.IsNumber(r)
		switch {
		case d && individual:
			if i > start {
				dst = append(dst, piece{start, i})
			}
			dst = append(dst, piece{i, i + utf8.RuneLen(r)})
			start = i + utf8.RuneLen(r)
		case d != inDigits && i > start:
			dst = append(dst, piece{start, i})
			start = i
		}
		inDigits = d
	}
	if start < len(s) {
		dst = append(dst, piece{start, len(s)})
	}
	return dst
}
