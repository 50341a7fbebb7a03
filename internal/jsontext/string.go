package jsontext

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error of this package: a malformed string
// literal.
var ErrSyntax = errors.New("invalid JSON string")

// SyntaxError is a malformed string literal: what is wrong, at which byte
// of the input.
type SyntaxError struct {
	// Msg says what is wrong ("unterminated string", "bad escape").
	Msg string
	// Offset is the index in the input of the offending byte (the input's
	// length when it ends too early).
	Offset int
}

// Error implements error.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%v: %s at byte %d", ErrSyntax, e.Msg, e.Offset)
}

// Unwrap makes errors.Is(err, ErrSyntax) hold.
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

func syntaxError(msg string, at int) error { return &SyntaxError{Msg: msg, Offset: at} }

// Word-at-a-time tests: lsb has the low bit of each byte set, msb the high.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special reports whether one of x's eight bytes is a quote, a backslash or
// a control character (< 0x20). Each term is exact as a whole: a byte's
// borrow can only make a higher byte look special when a lower one already
// is.
func special(x uint64) bool {
	q := x ^ (lsb * '"')
	bs := x ^ (lsb * '\\')
	return ((q-lsb)&^q|(bs-lsb)&^bs|(x-lsb*0x20)&^x)&msb != 0
}

// Scan reads the string literal whose opening quote is b[i] and returns the
// index just past its closing quote, and whether it holds escapes. It checks
// what encoding/json checks of a string's syntax (escapes, no raw control
// characters) but not UTF-8, which decoders repair. Errors are
// *SyntaxError.
//
// The closing quote and each backslash are found with bytes.IndexByte
// (vectorised), and the plain stretches between them are checked for
// control characters a word at a time.
func Scan(b []byte, i int) (end int, escaped bool, err error) {
	if i < 0 || i >= len(b) || b[i] != '"' {
		return i, false, syntaxError("want a string", max(i, 0))
	}
	i++
	n := len(b)
	quote := -1 // index of the first quote at or after i, once known
	for {
		if quote < i {
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				return n, escaped, unterminated(b, i)
			}
			quote = i + q
		}
		stop := quote
		if k := bytes.IndexByte(b[i:quote], '\\'); k >= 0 {
			stop = i + k
		}
		if c := firstControl(b[i:stop]); c >= 0 {
			return i + c, escaped, syntaxError("control character in string", i+c)
		}
		if stop == quote {
			return quote + 1, escaped, nil
		}
		// A backslash at stop.
		escaped = true
		i = stop + 1
		if i >= n {
			return n, escaped, syntaxError("unterminated string", n)
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			i++
			for range 4 {
				if i >= n {
					return n, escaped, syntaxError("unterminated string", n)
				}
				if !isHex(b[i]) {
					return i, escaped, syntaxError("bad \\u escape", i)
				}
				i++
			}
		default:
			return i, escaped, syntaxError("bad escape", i)
		}
	}
}

// unterminated is the error for a literal without a closing quote from
// b[i] on: a control character or bad escape before the end comes first.
func unterminated(b []byte, i int) error {
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c < 0x20:
			return syntaxError("control character in string", i)
		case c == '\\':
			i++
			if i >= len(b) {
				break
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k < len(b) && !isHex(b[i+k]) {
						return syntaxError("bad \\u escape", i+k)
					}
				}
				i += 4
			default:
				return syntaxError("bad escape", i)
			}
		}
	}
	return syntaxError("unterminated string", len(b))
}

// firstControl returns the index of b's first control character (< 0x20),
// or -1. It tests 32 bytes per step.
func firstControl(b []byte) int {
	i, n := 0, len(b)
	for ; i+32 <= n; i += 32 {
		x0 := binary.LittleEndian.Uint64(b[i:])
		x1 := binary.LittleEndian.Uint64(b[i+8:])
		x2 := binary.LittleEndian.Uint64(b[i+16:])
		x3 := binary.LittleEndian.Uint64(b[i+24:])
		if ((x0-lsb*0x20)&^x0|(x1-lsb*0x20)&^x1|(x2-lsb*0x20)&^x2|(x3-lsb*0x20)&^x3)&msb != 0 {
			break
		}
	}
	for ; i < n; i++ {
		if b[i] < 0x20 {
			return i
		}
	}
	return -1
}

// Plain reports whether body (a string literal's contents, without its
// quotes) needs no decoding: no quote, backslash or control character and
// valid UTF-8. Its bytes are then the string's value.
func Plain(body []byte) bool {
	return bytes.IndexByte(body, '"') < 0 && bytes.IndexByte(body, '\\') < 0 &&
		firstControl(body) < 0 && utf8.Valid(body)
}

// String decodes the string literal lit (quotes included, nothing around
// them) as encoding/json does: escapes decoded, each byte of invalid UTF-8
// and each lone surrogate becoming U+FFFD.
func String(lit []byte) (string, error) {
	end, esc, err := Scan(lit, 0)
	if err != nil {
		return "", err
	}
	if end != len(lit) {
		return "", syntaxError("data after the string", end)
	}
	body := lit[1 : end-1]
	if !esc && utf8.Valid(body) {
		return string(body), nil
	}
	if !esc {
		return string(AppendValid(make([]byte, 0, len(body)+8), body)), nil
	}
	buf, err := AppendUnescaped(make([]byte, 0, len(body)), lit)
	if err != nil {
		return "", err
	}
	if utf8.Valid(buf) {
		return string(buf), nil
	}
	return string(AppendValid(make([]byte, 0, len(buf)+8), buf)), nil
}

// AppendValid appends b to dst with each byte that is not part of valid
// UTF-8 replaced by U+FFFD, encoding/json's repair.
func AppendValid(dst, b []byte) []byte {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst
}

// AppendUnescaped appends the value of the string literal starting at
// lit[0] (its opening quote) to dst, escapes decoded: a surrogate pair
// written as two \u escapes becomes one character and a lone surrogate
// U+FFFD. Other bytes are copied as they are, invalid UTF-8 included.
// Anything after the closing quote is ignored. Errors are *SyntaxError.
func AppendUnescaped(dst, lit []byte) ([]byte, error) {
	if len(lit) == 0 || lit[0] != '"' {
		return dst, syntaxError("want a string", 0)
	}
	i, n := 1, len(lit)
	for {
		start := i
		for i+8 <= n && !special(binary.LittleEndian.Uint64(lit[i:])) {
			i += 8
		}
		for i < n {
			if c := lit[i]; c == '"' || c == '\\' || c < 0x20 {
				break
			}
			i++
		}
		dst = append(dst, lit[start:i]...)
		if i >= n {
			return dst, syntaxError("unterminated string", n)
		}
		switch c := lit[i]; {
		case c == '"':
			return dst, nil
		case c < 0x20:
			return dst, syntaxError("control character in string", i)
		}
		if i+1 >= n {
			return dst, syntaxError("unterminated string", n)
		}
		e := lit[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			dst = append(dst, e)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(lit, i)
			if !ok {
				return dst, syntaxError("bad \\u escape", i)
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// A valid pair is one character; anything else leaves the
				// second escape to be read on its own.
				pair := utf8.RuneError
				if i+1 < n && lit[i] == '\\' && lit[i+1] == 'u' {
					if r2, ok := hex4(lit, i+2); ok {
						if pair = utf16.DecodeRune(r, r2); pair != utf8.RuneError {
							i += 6
						}
					}
				}
				r = pair
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, syntaxError("bad escape", i-1)
		}
	}
}

// hex4 reads four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
