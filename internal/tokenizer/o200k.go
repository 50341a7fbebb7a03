package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// o200kPattern is the split regex of OpenAI's o200k vocabularies (gpt-oss,
// GPT-4o): words split at case changes, contractions attached, digits in
// threes. o200kSplitter implements it exactly; FuzzO200kSplitMatchesRegexp
// and TestO200kSplitMatchesRegexp check it against regexp2.
const o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

var _ splitter = o200kSplitter{}

// o200kSplitter tries the pattern's alternatives in order at each
// position, as a backtracking engine does:
//
//  1. an optional character X (not CR, LF, letter or number), upper-ish
//     letters U* (Lu Lt Lm Lo M), lower-ish letters L+ (Ll Lm Lo M), an
//     optional contraction; U* gives back characters that are also L when
//     L+ finds none after it;
//  2. X?, U+, L*, an optional contraction;
//  3. one to three numbers;
//  4. an optional space, characters that are neither space, letter nor
//     number, then CR, LF and '/';
//  5. to 7. white space as in the Qwen pattern.
type o200kSplitter struct{}

// Character class bits of o200kPattern.
const (
	o2U      = 1 << iota // Lu Lt Lm Lo M
	o2L                  // Ll Lm Lo M
	o2Letter             // \p{L}
	o2Number             // \p{N}
	o2Space              // \s
)

var o2ASCII [128]uint8

func init() {
	for c := range o2ASCII {
		o2ASCII[c] = o2ClassSlow(rune(c))
	}
}

func o2ClassSlow(r rune) uint8 {
	var c uint8
	switch {
	case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
		c = o2U | o2Letter
	case unicode.Is(unicode.Ll, r):
		c = o2L | o2Letter
	case unicode.Is(unicode.Lm, r) || unicode.Is(unicode.Lo, r):
		c = o2U | o2L | o2Letter
	case unicode.IsLetter(r):
		c = o2Letter
	case unicode.Is(unicode.M, r):
		c = o2U | o2L
	case unicode.IsNumber(r):
		c = o2Number
	case unicode.IsSpace(r):
		c = o2Space
	}
	return c
}

func o2At(s string, i int) (r rune, size int, cls uint8) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, o2ASCII[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, o2ClassSlow(r)
}

// o2Run returns the end of the run of characters with class bit bit at i.
func o2Run(s string, i int, bit uint8) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if o2ASCII[c]&bit == 0 {
				return i
			}
			i++
			continue
		}
		_, sz, c := o2At(s, i)
		if c&bit == 0 {
			return i
		}
		i += sz
	}
	return i
}

// o2Contraction returns the end of an optional contraction at i. Only
// ASCII letters count here: HuggingFace's tokenizers (Rust and JavaScript)
// and regexp2 agree that "ab'ſ" is "ab", "'", "ſ", though U+017F folds
// to 's' (at the start of the Qwen pattern the question does not arise:
// "'ſ" is one piece either way).
func o2Contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		return s[k] | 0x20
	}
	switch lower(i + 1) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if lower(i+2) == 'e' {
			return i + 3
		}
	case 'l':
		if lower(i+2) == 'l' {
			return i + 3
		}
	}
	return i
}

// o2UL matches U* L+ at p with U*'s backtracking; -1 when it fails.
func o2UL(s string, p int) int {
	k := o2Run(s, p, o2U)
	if k < len(s) {
		if _, _, c := o2At(s, k); c&o2L != 0 {
			return o2Run(s, k, o2L)
		}
	}
	// Give back U characters, last first, until one is also L.
	for j := k; j > p; {
		r, sz := utf8.DecodeLastRuneInString(s[p:j])
		j -= sz
		if o2ClassSlow(r)&o2L != 0 {
			return o2Run(s, j, o2L)
		}
	}
	return -1
}

func (o200kSplitter) appendEnds(dst []int, s string) []int {
	return isolated(dst, s, o200kMatch)
}

// o200kMatch returns the length of o200kPattern's match at i, or 0.
func o200kMatch(s string, i int) int {
	r, size, cls := o2At(s, i)
	isX := cls&(o2Letter|o2Number) == 0 && r != '\r' && r != '\n'
	// 1. X? U* L+ C?
	if isX && i+size < len(s) {
		if e := o2UL(s, i+size); e >= 0 {
			return o2Contraction(s, e) - i
		}
	}
	if e := o2UL(s, i); e >= 0 {
		return o2Contraction(s, e) - i
	}
	// 2. X? U+ L* C?
	if isX && i+size < len(s) {
		if k := o2Run(s, i+size, o2U); k > i+size {
			return o2Contraction(s, o2Run(s, k, o2L)) - i
		}
	}
	if k := o2Run(s, i, o2U); k > i {
		return o2Contraction(s, o2Run(s, k, o2L)) - i
	}
	// 3. \p{N}{1,3}
	if cls&o2Number != 0 {
		n := i
		for k := 0; k < 3 && n < len(s); k++ {
			_, sz, c := o2At(s, n)
			if c&o2Number == 0 {
				break
			}
			n += sz
		}
		return n - i
	}
	// 4.  ?[^\s\p{L}\p{N}]+[\r\n/]*
	start := i
	if r == ' ' && i+1 < len(s) {
		if _, _, c2 := o2At(s, i+1); c2&(o2Space|o2Letter|o2Number) == 0 {
			start = i + 1
			cls = 0
		}
	}
	if cls&(o2Space|o2Letter|o2Number) == 0 {
		n := start
		for n < len(s) {
			_, sz, c := o2At(s, n)
			if c&(o2Space|o2Letter|o2Number) != 0 {
				break
			}
			n += sz
		}
		for n < len(s) && (s[n] == '\r' || s[n] == '\n' || s[n] == '/') {
			n++
		}
		return n - i
	}
	if cls&o2Space == 0 {
		return 0
	}
	// White space: its run [i, j) and its last CR/LF.
	j, lastNL := i, -1
	for j < len(s) {
		r2, sz, c2 := o2At(s, j)
		if c2&o2Space == 0 {
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
