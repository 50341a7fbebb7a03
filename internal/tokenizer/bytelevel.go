package tokenizer

import "unicode/utf8"

// byteToRune is the GPT-2 byte alphabet: every byte maps to a printable
// rune so that byte-level tokens are valid, visible strings. Printable
// Latin-1 bytes map to themselves; the other 68 bytes map, in byte order, to
// U+0100 and upwards (space becomes 'Ġ', newline 'Ċ').
var byteToRune [256]rune

// runeToByte inverts byteToRune.
var runeToByte map[rune]byte

func init() {
	runeToByte = make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = 256 + n
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelDecode maps a byte-level token string back to raw bytes. When
// any rune of the token is outside the alphabet, the token's own UTF-8 bytes
// are used instead (HuggingFace's ByteLevel decoder does the same, which
// matters for added tokens such as "<|im_start|>" or ones holding spaces).
func byteLevelDecode(tok string) (raw string, ok bool) {
	plain := true
	for i := 0; i < len(tok); i++ {
		if tok[i] < '!' || tok[i] > '~' {
			plain = false
			break
		}
	}
	if plain { // printable ASCII stands for itself
		return tok, true
	}
	buf := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, in := runeToByte[r]
		if !in {
			return tok, false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}

// byteLevelEncode maps raw bytes to their byte-level string.
func byteLevelEncode(raw string) string {
	buf := make([]byte, 0, len(raw)*2)
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteToRune[raw[i]])
	}
	return string(buf)
}

// appendLossy appends b to dst as valid UTF-8, replacing each maximal
// invalid subsequence with U+FFFD, as Rust's String::from_utf8_lossy and the
// WHATWG decoder do (Go's utf8 package would replace byte by byte).
func appendLossy(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			dst = append(dst, b[i:i+size]...)
			i += size
			continue
		}
		i += invalidPrefixLen(b[i:])
		dst = append(dst, "\uFFFD"...)
	}
	return dst
}

// invalidPrefixLen returns the length of the maximal invalid subsequence at
// the start of b, which does not begin with a valid rune: the lead byte plus
// as many continuation bytes as could still have formed a valid sequence.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// validUTF8 returns s unchanged when it is valid UTF-8 and otherwise its
// lossy repair (see appendLossy).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossy(make([]byte, 0, len(s)+8), []byte(s)))
}
