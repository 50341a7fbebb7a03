package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// DeepSeek V3's three Split patterns (Isolated, in this order), which the
// hand-written splitters below implement exactly; regexp2 serves any
// other pattern. FuzzDeepSeekSplitMatchesRegexp checks them against it.
const (
	deepseekDigits = `\p{N}{1,3}`
	deepseekCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekWords  = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^` + "\r\n" + `\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[` + "\r\n" + `]*|\s*[` + "\r\n" + `]+|\s+(?!\S)|\s+`
)

var (
	_ splitter = digitGroupSplitter{}
	_ splitter = cjkSplitter{}
	_ splitter = deepseekWordSplitter{}
)

// isolated appends the piece ends of an Isolated split given a matcher
// that returns the length of the match at i, or 0 when none starts there:
// matches are pieces, and so is each stretch between them.
func isolated(dst []int, s string, match func(s string, i int) int) []int {
	gap := false
	for i := 0; i < len(s); {
		if n := match(s, i); n > 0 {
			if gap {
				dst = append(dst, i)
				gap = false
			}
			i += n
			dst = append(dst, i)
			continue
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		gap = true
	}
	if gap {
		dst = append(dst, len(s))
	}
	return dst
}

// digitGroupSplitter is `\p{N}{1,3}`.
type digitGroupSplitter struct{}

func (digitGroupSplitter) appendEnds(dst []int, s string) []int {
	return isolated(dst, s, func(s string, i int) int {
		n := 0
		for k := 0; k < 3 && i+n < len(s); k++ {
			r, size := decodeAt(s, i+n)
			if !unicode.IsNumber(r) {
				break
			}
			n += size
		}
		return n
	})
}

// cjkSplitter is `[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+`.
type cjkSplitter struct{}

func isDeepSeekCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

func (cjkSplitter) appendEnds(dst []int, s string) []int {
	return isolated(dst, s, func(s string, i int) int {
		n := i
		for n < len(s) && s[n] >= 0xE3 { // every character of the ranges starts with 0xE3..0xE9
			r, size := utf8.DecodeRuneInString(s[n:])
			if !isDeepSeekCJK(r) {
				break
			}
			n += size
		}
		return n - i
	})
}

// deepseekWordSplitter is deepseekWords. At each position the
// alternatives are tried in the pattern's order, as a backtracking engine
// does:
//
//  1. an ASCII punctuation character, then ASCII letters;
//  2. an optional character that is not CR, LF, letter, punctuation or
//     symbol, then letters and marks;
//  3. an optional space, then punctuation and symbols, then any CR/LF;
//  4. white space up to and including its last CR/LF;
//  5. white space not followed by a non-space; 6. white space.
//
// A character none of them matches at (a digit, a control character…)
// belongs to the stretch between matches.
type deepseekWordSplitter struct{}

func (deepseekWordSplitter) appendEnds(dst []int, s string) []int {
	return isolated(dst, s, deepseekMatch)
}

// Character classes of deepseekWords.
const (
	dsOther  = iota
	dsLetter // \p{L}
	dsMark   // \p{M}
	dsPunct  // \p{P} or \p{S}
	dsSpace  // \s
)

var dsASCII [128]uint8

func init() {
	for c := range dsASCII {
		dsASCII[c] = dsClassSlow(rune(c))
	}
}

func dsClassSlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return dsLetter
	case unicode.Is(unicode.M, r):
		return dsMark
	case unicode.IsPunct(r) || unicode.IsSymbol(r):
		return dsPunct
	case unicode.IsSpace(r):
		return dsSpace
	}
	return dsOther
}

func dsAt(s string, i int) (r rune, size int, cls uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, dsASCII[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, dsClassSlow(r)
}

func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

func isASCIILetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// deepseekMatch returns the length of deepseekWords' match at i, or 0.
func deepseekMatch(s string, i int) int {
	r, size, cls := dsAt(s, i)
	// 1. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if r < utf8.RuneSelf && cls == dsPunct && i+1 < len(s) && isASCIILetter(s[i+1]) {
		n := i + 1
		for n < len(s) && isASCIILetter(s[n]) {
			n++
		}
		return n - i
	}
	// 2. [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if cls != dsLetter && cls != dsPunct && r != '\r' && r != '\n' && i+size < len(s) {
		if n := lettersMarks(s, i+size); n > 0 {
			return size + n
		}
	}
	if cls == dsLetter || cls == dsMark {
		return lettersMarks(s, i)
	}
	// 3.  ?[\p{P}\p{S}]+[\r\n]*
	start := i
	if r == ' ' && i+1 < len(s) {
		if _, _, c2 := dsAt(s, i+1); c2 == dsPunct {
			start = i + 1
			cls = dsPunct
		}
	}
	if cls == dsPunct {
		n := start
		for n < len(s) {
			_, sz, c2 := dsAt(s, n)
			if c2 != dsPunct {
				break
			}
			n += sz
		}
		for n < len(s) && (s[n] == '\r' || s[n] == '\n') {
			n++
		}
		return n - i
	}
	if cls != dsSpace {
		return 0
	}
	// White space: its run [i, j) and its last CR/LF.
	j, lastNL := i, -1
	for j < len(s) {
		r2, sz, c2 := dsAt(s, j)
		if c2 != dsSpace {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			lastNL = j
		}
		j += sz
	}
	// 4. \s*[\r\n]+
	if lastNL >= 0 {
		return lastNL + 1 - i
	}
	// 5. \s+(?!\S) and 6. \s+
	if j == len(s) {
		return j - i
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[i:j])
	if j-lastSize > i {
		return j - lastSize - i
	}
	return j - i
}

// lettersMarks returns the byte length of the run of letters and marks at i.
func lettersMarks(s string, i int) int {
	n := i
	for n < len(s) {
		if c := s[n]; c < utf8.RuneSelf {
			if dsASCII[c] != dsLetter {
				break
			}
			n++
			continue
		}
		_, sz, c := dsAt(s, n)
		if c != dsLetter && c != dsMark {
			break
		}
		n += sz
	}
	return n - i
}
