package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// decodeValue decodes one JSON document into the template engine's value
// model, keeping object keys in the order they appear in the input (a Go
// map would lose it, and tojson would then print tool schemas in a
// different order than HuggingFace does). Integers that fit in int64 stay
// integers, every other number becomes a float. Duplicate keys keep the
// position of their first occurrence and the last value, as Python's dict
// and JavaScript's JSON.parse do. maxDepth bounds nesting.
func decodeValue(data []byte, maxDepth int) (jinja.Value, error) {
	d := decoder{maxDepth: maxDepth}
	return d.decode(data)
}

// decoder is a small recursive-descent JSON parser producing template
// values directly. It accepts exactly what encoding/json accepts (checked
// by FuzzDecodeMatchesEncodingJSON) and decodes strings the same way,
// invalid UTF-8 and lone surrogates becoming U+FFFD; it exists because
// json.Decoder.Token costs about half of a render.
type decoder struct {
	maxDepth int
	data     []byte
	pos      int
}

var errEOF = errors.New("unexpected end of JSON input")

func (d *decoder) decode(data []byte) (jinja.Value, error) {
	d.data, d.pos = data, 0
	v, err := d.value(0)
	if err != nil {
		return jinja.Undefined(), err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return jinja.Undefined(), fmt.Errorf("trailing data after JSON value at offset %d", d.pos)
	}
	return v, nil
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) syntax(what string) error {
	if d.pos >= len(d.data) {
		return errEOF
	}
	return fmt.Errorf("invalid character %q %s at offset %d", d.data[d.pos], what, d.pos)
}

func (d *decoder) value(depth int) (jinja.Value, error) {
	d.skipSpace()
	if d.pos >= len(d.data) {
		return jinja.Undefined(), errEOF
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		if depth >= d.maxDepth {
			return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d levels", d.maxDepth)
		}
		return d.object(depth)
	case c == '[':
		if depth >= d.maxDepth {
			return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d levels", d.maxDepth)
		}
		return d.array(depth)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		return jinja.NewString(s), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return d.literal("true", jinja.NewBool(true))
	case c == 'f':
		return d.literal("false", jinja.NewBool(false))
	case c == 'n':
		return d.literal("null", jinja.None())
	default:
		return jinja.Undefined(), d.syntax("looking for beginning of value")
	}
}

func (d *decoder) literal(word string, v jinja.Value) (jinja.Value, error) {
	for i := 0; i < len(word); i++ {
		if d.pos >= len(d.data) {
			return jinja.Undefined(), errEOF
		}
		if d.data[d.pos] != word[i] {
			return jinja.Undefined(), d.syntax("in literal " + word)
		}
		d.pos++
	}
	return v, nil
}

func (d *decoder) array(depth int) (jinja.Value, error) {
	d.pos++ // [
	items := []jinja.Value{}
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return jinja.NewList(items), nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return jinja.Undefined(), err
		}
		items = append(items, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return jinja.Undefined(), errEOF
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return jinja.NewList(items), nil
		default:
			return jinja.Undefined(), d.syntax("after array element")
		}
	}
}

func (d *decoder) object(depth int) (jinja.Value, error) {
	d.pos++ // {
	obj := jinja.NewDict()
	dict := obj.AsDict()
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return obj, nil
	}
	for {
		d.skipSpace()
		if d.pos >= len(d.data) {
			return jinja.Undefined(), errEOF
		}
		if d.data[d.pos] != '"' {
			return jinja.Undefined(), d.syntax("looking for beginning of object key string")
		}
		key, err := d.str()
		if err != nil {
			return jinja.Undefined(), err
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return jinja.Undefined(), errEOF
		}
		if d.data[d.pos] != ':' {
			return jinja.Undefined(), d.syntax("after object key")
		}
		d.pos++
		v, err := d.value(depth + 1)
		if err != nil {
			return jinja.Undefined(), err
		}
		dict.Set(key, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return jinja.Undefined(), errEOF
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return obj, nil
		default:
			return jinja.Undefined(), d.syntax("after object key:value pair")
		}
	}
}

// number scans a JSON number (RFC 8259 grammar) and converts it.
func (d *decoder) number() (jinja.Value, error) {
	start := d.pos
	b := d.data
	isFloat := false
	if d.pos < len(b) && b[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos >= len(b):
		return jinja.Undefined(), errEOF
	case b[d.pos] == '0':
		d.pos++
	case b[d.pos] >= '1' && b[d.pos] <= '9':
		for d.pos < len(b) && b[d.pos] >= '0' && b[d.pos] <= '9' {
			d.pos++
		}
	default:
		return jinja.Undefined(), d.syntax("in numeric literal")
	}
	if d.pos < len(b) && b[d.pos] == '.' {
		isFloat = true
		d.pos++
		if d.pos >= len(b) {
			return jinja.Undefined(), errEOF
		}
		if b[d.pos] < '0' || b[d.pos] > '9' {
			return jinja.Undefined(), d.syntax("after decimal point in numeric literal")
		}
		for d.pos < len(b) && b[d.pos] >= '0' && b[d.pos] <= '9' {
			d.pos++
		}
	}
	if d.pos < len(b) && (b[d.pos] == 'e' || b[d.pos] == 'E') {
		isFloat = true
		d.pos++
		if d.pos < len(b) && (b[d.pos] == '+' || b[d.pos] == '-') {
			d.pos++
		}
		if d.pos >= len(b) {
			return jinja.Undefined(), errEOF
		}
		if b[d.pos] < '0' || b[d.pos] > '9' {
			return jinja.Undefined(), d.syntax("in exponent of numeric literal")
		}
		for d.pos < len(b) && b[d.pos] >= '0' && b[d.pos] <= '9' {
			d.pos++
		}
	}
	s := string(b[start:d.pos])
	if !isFloat {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("number %s out of range", s)
	}
	return jinja.NewFloat(f), nil
}

// str scans a JSON string starting at its opening quote.
func (d *decoder) str() (string, error) {
	d.pos++ // opening quote
	start := d.pos
	b := d.data
	// Fast path: no escapes, valid UTF-8, no control characters.
	for d.pos < len(b) {
		c := b[d.pos]
		if c == '"' {
			s := b[start:d.pos]
			d.pos++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return string([]rune(string(s))), nil // invalid bytes -> U+FFFD, as encoding/json
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", d.syntax("in string literal")
		}
		d.pos++
	}
	if d.pos >= len(b) {
		return "", errEOF
	}
	out := make([]byte, 0, d.pos-start+16)
	out = append(out, b[start:d.pos]...)
	for d.pos < len(b) {
		c := b[d.pos]
		switch {
		case c == '"':
			d.pos++
			if utf8.Valid(out) {
				return string(out), nil
			}
			return string([]rune(string(out))), nil
		case c < 0x20:
			return "", d.syntax("in string literal")
		case c != '\\':
			out = append(out, c)
			d.pos++
			continue
		}
		d.pos++ // backslash
		if d.pos >= len(b) {
			return "", errEOF
		}
		e := b[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// A high surrogate followed by an escaped low one is one
				// character; anything else is U+FFFD (encoding/json's rule).
				r2 := rune(-1)
				if d.pos+1 < len(b) && b[d.pos] == '\\' && b[d.pos+1] == 'u' {
					save := d.pos
					d.pos += 2
					var err error
					if r2, err = d.hex4(); err != nil {
						return "", err
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						out = utf8.AppendRune(out, dec)
						continue
					}
					d.pos = save
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			d.pos--
			return "", d.syntax("in string escape code")
		}
	}
	return "", errEOF
}

func (d *decoder) hex4() (rune, error) {
	if d.pos+4 > len(d.data) {
		return 0, errEOF
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := d.data[d.pos]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, d.syntax("in \\u hexadecimal character escape")
		}
		r = r<<4 | rune(c)
		d.pos++
	}
	return r, nil
}
