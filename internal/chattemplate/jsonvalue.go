package chattemplate

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"

	"github.com/kvrouter/kvrouter/internal/jsontext"
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

func (d *decoder) skipSpace() { d.pos = jsontext.SkipSpace(d.data, d.pos) }

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

// str scans a JSON string starting at its opening quote and decodes it as
// encoding/json does (jsontext: a message's long content is skipped eight
// bytes at a time).
func (d *decoder) str() (string, error) {
	end, esc, err := jsontext.Scan(d.data, d.pos)
	if err != nil {
		var se *jsontext.SyntaxError
		if errors.As(err, &se) {
			d.pos = se.Offset
		}
		return "", d.syntax("in string literal")
	}
	lit := d.data[d.pos:end]
	d.pos = end
	if body := lit[1 : len(lit)-1]; !esc && utf8.Valid(body) {
		return string(body), nil
	}
	return jsontext.String(lit)
}
