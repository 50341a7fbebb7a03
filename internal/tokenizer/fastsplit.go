package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Split patterns the fast splitter implements exactly. Any other pattern goes
// to regexp2. Both are fuzzed against each other (FuzzFastSplitMatchesRegexp).
const (
	// qwenPattern is the split regex of Qwen2, Qwen2.5 and Qwen3: digits one
	// at a time.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// llama3Pattern is Llama 3's: digits in runs of up to three.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// fastSplitter is a hand-written matcher for qwenPattern and llama3Pattern.
// It follows the regex alternatives in order at each position, as a
// backtracking engine would:
//
//  1. a contraction ('s 't 're 've 'm 'll 'd, any case);
//  2. an optional character that is not CR, LF, letter or number, then letters;
//  3. one number character (up to maxDigits);
//  4. an optional space, then characters that are neither space, letter nor
//     number, then any CR/LF;
//  5. white space up to and including its last CR/LF;
//  6. white space not followed by a non-space: the whole run at the end of
//     the text, else the run minus its last character;
//  7. white space.
//
// Every character is a letter, a number, white space or something else, so
// some alternative always matches and there are never gaps.
type fastSplitter struct {
	maxDigits int
}

// Character classes of the pattern.
const (
	clsOther = iota // neither letter, number nor white space
	clsLetter
	clsNumber
	clsSpace
)

// asciiClass classifies the 128 ASCII characters.
var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		asciiClass[c] = classifySlow(rune(c))
	}
}

func classifySlow(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r): // \s: Unicode White_Space, as regexp2 and Oniguruma
		return clsSpace
	}
	return clsOther
}

// at decodes the rune at byte offset i and classifies it. The ASCII case
// is small enough to be inlined into the scanning loops.
func at(s string, i int) (r rune, size int, cls uint8) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	return atRune(s, i)
}

// atRune is at for a multi-byte character.
func atRune(s string, i int) (r rune, size int, cls uint8) {
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, classifySlow(r)
}

func (f *fastSplitter) appendEnds(dst []int, s string) []int {
	for i := 0; i < len(s); {
		i += f.match(s, i)
		dst = append(dst, i)
	}
	return dst
}

// match returns the byte length of the pattern's match at i (i < len(s)); it
// is always at least one character.
func (f *fastSplitter) match(s string, i int) int {
	r, size, cls := at(s, i)
	// 1. Contractions.
	if r == '\'' && i+1 < len(s) {
		if n := contraction(s[i+1:]); n > 0 {
			return 1 + n
		}
	}
	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return size + letters(s, i+size)
	}
	if cls != clsNumber && r != '\r' && r != '\n' && i+size < len(s) {
		if _, _, c2 := at(s, i+size); c2 == clsLetter {
			return size + letters(s, i+size)
		}
	}
	// 3. \p{N} or \p{N}{1,3}
	if cls == clsNumber {
		n := size
		for k := 1; k < f.maxDigits && i+n < len(s); k++ {
			_, sz, c2 := at(s, i+n)
			if c2 != clsNumber {
				break
			}
			n += sz
		}
		return n
	}
	// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	if cls == clsOther {
		return size + others(s, i+size)
	}
	if r == ' ' && i+1 < len(s) {
		if _, _, c2 := at(s, i+1); c2 == clsOther {
			return 1 + others(s, i+1)
		}
	}
	// White space from here on: find its run [i, j) and its last CR/LF.
	j, lastNL := i, -1
	for j < len(s) {
		r2, sz, c2 := at(s, j)
		if c2 != clsSpace {
			break
		}
		if r2 == '\r' || r2 == '\n' {
			lastNL = j
		}
		j += sz
	}
	// 5. \s*[\r\n]+
	if lastNL >= 0 {
		return lastNL + 1 - i
	}
	// 6. \s+(?!\S) and 7. \s+
	if j == len(s) {
		return j - i
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[i:j])
	if j-lastSize > i {
		return j - lastSize - i
	}
	return j - i
}

// letters returns the byte length of the run of letters at i.
func letters(s string, i int) int {
	n := i
	for n < len(s) {
		if c := s[n]; c < utf8.RuneSelf { // ASCII: one table lookup
			if asciiClass[c] != clsLetter {
				break
			}
			n++
			continue
		}
		_, sz, c := atRune(s, n)
		if c != clsLetter {
			break
		}
		n += sz
	}
	return n - i
}

// others returns the byte length of [^\s\p{L}\p{N}]*[\r\n]* at i.
func others(s string, i int) int {
	n := i
	for n < len(s) {
		if c := s[n]; c < utf8.RuneSelf { // ASCII: one table lookup
			if asciiClass[c] != clsOther {
				break
			}
			n++
			continue
		}
		_, sz, c := atRune(s, n)
		if c != clsOther {
			break
		}
		n += sz
	}
	for n < len(s) && (s[n] == '\r' || s[n] == '\n') {
		n++
	}
	return n - i
}

// contraction returns the length of the contraction suffix (s, t, re, ve,
// m, ll, d in any case) at the start of s, or 0.
func contraction(s string) int {
	r, n := foldASCII(s, 0)
	switch r {
	case 's', 't', 'm', 'd':
		return n
	case 'r', 'v':
		if r2, n2 := foldASCII(s, n); r2 == 'e' {
			return n + n2
		}
	case 'l':
		if r2, n2 := foldASCII(s, n); r2 == 'l' {
			return n + n2
		}
	}
	return 0
}

// foldASCII returns the lower-case ASCII letter the rune at s[i:] matches
// case-insensitively, with its byte length; 0 when there is none. Besides
// the ASCII upper-case letters this includes U+017F (long s) and U+212A
// (Kelvin sign), which Unicode case folding maps to 's' and 'k'.
func foldASCII(s string, i int) (rune, int) {
	if i >= len(s) {
		return 0, 0
	}
	c := s[i]
	if c < utf8.RuneSelf {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return rune(c), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch r {
	case 0x17F:
		return 's', n
	case 0x212A:
		return 'k', n
	}
	return 0, n
}
