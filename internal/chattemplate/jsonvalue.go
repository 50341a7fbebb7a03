package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

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

// decoder decodes JSON into template values.
type decoder struct {
	maxDepth int
}

func (d *decoder) decode(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := d.next(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func (d *decoder) next(dec *json.Decoder, depth int) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return jinja.Undefined(), errors.New("unexpected end of JSON input")
		}
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t)
	case json.Delim:
		if depth >= d.maxDepth {
			return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d levels", d.maxDepth)
		}
		switch t {
		case '[':
			items := []jinja.Value{}
			for dec.More() {
				v, err := d.next(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			obj := jinja.NewDict()
			dict := obj.AsDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, ok := kt.(string)
				if !ok {
					return jinja.Undefined(), fmt.Errorf("object key is %T, want string", kt)
				}
				v, err := d.next(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				dict.Set(key, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return jinja.Undefined(), err
			}
			return obj, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// numberValue keeps integer literals as integers (Python's json.loads does
// the same) and turns everything else into a float.
func numberValue(n json.Number) (jinja.Value, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("number %q out of range", s)
	}
	return jinja.NewFloat(f), nil
}
