package tokenizer

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/jsontext"
)

// The vocabulary and merges are 99 % of an 11 MB tokenizer.json. Decoding
// them with encoding/json into interface values or RawMessages costs
// hundreds of milliseconds at start-up, so this file scans exactly the two
// shapes they have — an object of string → integer and an array of merges —
// by hand. It trusts nothing: every length is checked and malformed input
// yields an error, never a panic.

var errJSON = errors.New("malformed JSON")

// scanner reads JSON values from a byte slice.
type scanner struct {
	b   []byte
	i   int
	buf []byte
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errJSON, s.i, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() { s.i = jsontext.SkipSpace(s.b, s.i) }

// peek returns the next non-space byte without consuming it (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) expect(c byte) error {
	if s.peek() != c {
		return s.errorf("expected %q", c)
	}
	s.i++
	return nil
}

// str reads a JSON string and returns its decoded value, invalid UTF-8
// repaired as HuggingFace does (validUTF8).
func (s *scanner) str() (string, error) {
	lit, esc, err := s.lit()
	if err != nil {
		return "", err
	}
	if !esc {
		return validUTF8(string(lit[1 : len(lit)-1])), nil
	}
	if s.buf, err = jsontext.AppendUnescaped(s.buf[:0], lit); err != nil {
		return "", s.errorf("%v", err)
	}
	return validUTF8(string(s.buf)), nil
}

// lit steps over the JSON string literal at the scanner's position and
// returns it, quotes included, and whether it holds escapes.
func (s *scanner) lit() (lit []byte, escaped bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.errorf("expected %q", '"')
	}
	end, esc, err := jsontext.Scan(s.b, s.i)
	if err != nil {
		var se *jsontext.SyntaxError
		if errors.As(err, &se) {
			s.i = se.Offset
			return nil, false, s.errorf("%s", se.Msg)
		}
		return nil, false, s.errorf("%v", err)
	}
	lit = s.b[s.i:end]
	s.i = end
	return lit, esc, nil
}

// uint32 reads a non-negative integer that fits in 32 bits.
func (s *scanner) uint32() (uint32, error) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + uint64(s.b[s.i]-'0')
		if v > 1<<32-1 {
			return 0, s.errorf("id out of range")
		}
		s.i++
	}
	if s.i == start {
		return 0, s.errorf("expected a non-negative integer")
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, s.errorf("expected an integer")
	}
	return uint32(v), nil
}

// end reports an error when anything but white space is left.
func (s *scanner) end() error {
	if s.peek() != 0 {
		return s.errorf("trailing data")
	}
	return nil
}

// parseVocab reads {"token": id, ...} at the scanner's position. A token
// listed twice keeps its last id.
func parseVocab(s *scanner) (map[string]uint32, error) {
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	// Presize from the input: a vocab entry plus its merge take about 80
	// bytes of a byte-level tokenizer.json.
	vocab := make(map[string]uint32, min(max(1024, len(s.b)/80), 1<<22))
	if s.peek() == '}' {
		s.i++
		return vocab, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		id, err := s.uint32()
		if err != nil {
			return nil, err
		}
		vocab[k] = id
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return vocab, nil
		default:
			return nil, s.errorf("expected ',' or '}' in vocab")
		}
	}
}

// parseMerges reads the merges list in either form — ["a b", ...] (the
// older form, split at its single space) or [["a", "b"], ...] — and calls fn
// with each pair. The slices are only valid during the call.
func parseMerges(s *scanner, fn func(rank int, left, right []byte) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	var left []byte
	for rank := 0; ; rank++ {
		switch s.peek() {
		case '"':
			line, err := s.rawStr()
			if err != nil {
				return err
			}
			sp := bytes.IndexByte(line, ' ')
			if sp < 0 || bytes.IndexByte(line[sp+1:], ' ') >= 0 {
				return fmt.Errorf("merge %d %q: want two tokens separated by one space", rank+1, line)
			}
			if err := fn(rank, line[:sp], line[sp+1:]); err != nil {
				return err
			}
		case '[':
			s.i++
			a, err := s.rawStr()
			if err != nil {
				return err
			}
			left = append(left[:0], a...) // a may live in s.buf
			if err := s.expect(','); err != nil {
				return err
			}
			r, err := s.rawStr()
			if err != nil {
				return err
			}
			if err := s.expect(']'); err != nil {
				return err
			}
			if err := fn(rank, left, r); err != nil {
				return err
			}
		default:
			return s.errorf("expected a merge")
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.errorf("expected ',' or ']' in merges")
		}
	}
}

// rawStr reads a JSON string and returns its decoded bytes without
// allocating: a view of the input when the string has no escapes, otherwise
// of the scanner's buffer (then with invalid UTF-8 repaired, as str does).
// The result is valid until the next call.
func (s *scanner) rawStr() ([]byte, error) {
	start := s.i
	lit, esc, err := s.lit()
	if err != nil {
		return nil, err
	}
	if !esc {
		return lit[1 : len(lit)-1], nil
	}
	s.i = start
	v, err := s.str()
	if err != nil {
		return nil, err
	}
	s.buf = append(s.buf[:0], v...)
	return s.buf, nil
}

// skip steps over one JSON value of any kind and returns its bytes. It
// checks nesting and strings but not the grammar of scalars: what it skips
// is either ignored or parsed again by a strict parser.
func (s *scanner) skip() ([]byte, error) {
	s.ws()
	start := s.i
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			if _, err := s.rawStr(); err != nil {
				return nil, err
			}
			if depth == 0 {
				return s.b[start:s.i], nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing container
				if s.i == start {
					return nil, s.errorf("expected a value")
				}
				return s.b[start:s.i], nil
			}
			depth--
			if depth == 0 {
				s.i++
				return s.b[start:s.i], nil
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				if s.i == start {
					return nil, s.errorf("expected a value")
				}
				return s.b[start:s.i], nil
			}
		}
		s.i++
	}
	if depth != 0 || s.i == start {
		return nil, s.errorf("truncated value")
	}
	return s.b[start:s.i], nil
}

// object reads a JSON object, returning each member's raw value. A key that
// appears twice keeps its last value, as encoding/json does. When hook is
// not nil it is offered each key first; if it returns true it has consumed
// the value itself (and the key is left out of the result).
func (s *scanner) object(hook func(key string) (bool, error)) (map[string][]byte, error) {
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	if s.peek() == '}' {
		s.i++
		return out, nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		if hook != nil {
			done, err := hook(k)
			if err != nil {
				return nil, err
			}
			if done {
				goto next
			}
		}
		{
			v, err := s.skip()
			if err != nil {
				return nil, err
			}
			out[k] = v
		}
	next:
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return out, nil
		default:
			return nil, s.errorf("expected ',' or '}'")
		}
	}
}
