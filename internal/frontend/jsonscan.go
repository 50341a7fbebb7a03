package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"

	"github.com/kvrouter/kvrouter/internal/jsontext"
)

// errSyntax reports malformed JSON found by scanObject.
var errSyntax = errors.New("invalid JSON")

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

// scanObject checks that b is one syntactically valid JSON object and
// calls fn with each top-level member's key and the raw bytes of its
// value (a sub-slice of b), in order; a repeated key is reported each
// time. It decodes nothing: the front door reads a few small fields and
// hands big values (an 8k-id prompt) to dedicated decoders, where
// encoding/json would scan them twice.
//
// fast, when not nil, may consume a member's value itself: given the key
// and the value's start, it returns the index just past the value, or ok
// false to leave the value to the generic scanner.
func scanObject(b []byte, fn func(key string, val []byte) error, fast func(key string, b []byte, i int) (end int, ok bool)) error {
	s := jscan{b: b}
	s.ws()
	if s.i >= len(b) || b[s.i] != '{' {
		return s.fail("want an object")
	}
	s.i++
	s.ws()
	if s.peek() == '}' {
		s.i++
		return s.end()
	}
	for {
		s.ws()
		if s.peek() != '"' {
			return s.fail("want a member name")
		}
		ks := s.i
		esc, err := s.str()
		if err != nil {
			return err
		}
		key := string(b[ks+1 : s.i-1])
		if esc || !utf8.ValidString(key) {
			if err := json.Unmarshal(b[ks:s.i], &key); err != nil {
				return s.fail("bad member name")
			}
		}
		s.ws()
		if s.peek() != ':' {
			return s.fail("want ':'")
		}
		s.i++
		s.ws()
		vs := s.i
		if end, ok := 0, false; fast != nil {
			if end, ok = fast(key, b, vs); ok {
				s.i = end
			}
			if !ok {
				if err := s.value(1); err != nil {
					return err
				}
			}
		} else if err := s.value(1); err != nil {
			return err
		}
		if err := fn(key, b[vs:s.i]); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return s.end()
		default:
			return s.fail("want ',' or '}'")
		}
	}
}

type jscan struct {
	b []byte
	i int
}

func (s *jscan) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errSyntax, what, s.i)
}

func (s *jscan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *jscan) ws() { s.i = jsontext.SkipSpace(s.b, s.i) }

func (s *jscan) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.fail("trailing data")
	}
	return nil
}

func (s *jscan) value(depth int) error {
	if depth > maxDepth {
		return s.fail("nested too deeply")
	}
	switch c := s.peek(); {
	case c == '"':
		_, err := s.str()
		return err
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	}
	return s.fail("want a value")
}

// object skips the object at '{', its members one level deeper.
func (s *jscan) object(depth int) error {
	s.i++
	s.ws()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.peek() != '"' {
			return s.fail("want a member name")
		}
		if _, err := s.str(); err != nil {
			return err
		}
		s.ws()
		if s.peek() != ':' {
			return s.fail("want ':'")
		}
		s.i++
		s.ws()
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return s.fail("want ',' or '}'")
		}
	}
}

// array skips the array at '[', its elements one level deeper.
func (s *jscan) array(depth int) error {
	s.i++
	s.ws()
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if err := s.value(depth + 1); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("want ',' or ']'")
		}
	}
}

func (s *jscan) lit(w string) error {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return s.fail("bad literal")
	}
	s.i += len(w)
	return nil
}

// number scans a JSON number with local indexes: it is the hot loop of
// a token-id prompt.
func (s *jscan) number() error {
	b, i, n := s.b, s.i, len(s.b)
	if i < n && b[i] == '-' {
		i++
	}
	digits := func() bool {
		st := i
		for i < n && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > st
	}
	switch {
	case i < n && b[i] == '0':
		i++
	case !digits():
		s.i = i
		return s.fail("bad number")
	}
	if i < n && b[i] == '.' {
		i++
		if !digits() {
			s.i = i
			return s.fail("bad number")
		}
	}
	if i < n && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < n && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			s.i = i
			return s.fail("bad number")
		}
	}
	s.i = i
	return nil
}

// str scans a string starting at its opening quote; esc says whether it
// holds escapes. A prompt is one long string: jsontext.Scan skips its plain
// bytes eight at a time.
func (s *jscan) str() (esc bool, err error) {
	end, esc, err := jsontext.Scan(s.b, s.i)
	if err != nil {
		var se *jsontext.SyntaxError
		if errors.As(err, &se) {
			s.i = se.Offset
			return esc, s.fail(se.Msg)
		}
		return esc, s.fail("bad string")
	}
	s.i = end
	return esc, nil
}

// jsonString decodes a JSON string literal as encoding/json does. Without
// escapes and in valid UTF-8 the result shares raw's memory instead of
// copying it (an 8k-token prompt is ~40 KB): raw must not be modified
// while the string is in use. The front door never writes to a request
// body after reading it, and the tokenizer copies what it keeps.
func jsonString(raw []byte) (string, error) {
	raw = bytes.Trim(raw, " \t\r\n")
	if len(raw) == 0 || raw[0] != '"' {
		var s string // not a string: encoding/json's answer (null is "")
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	if len(raw) >= 2 && raw[len(raw)-1] == '"' {
		if in := raw[1 : len(raw)-1]; jsontext.Plain(in) {
			return unsafe.String(unsafe.SliceData(in), len(in)), nil
		}
	}
	return jsontext.String(raw)
}

// parseFields reads the fields the front door needs from a completion or
// chat body, checking the whole body's syntax.
func parseFields(body []byte) (requestFields, error) {
	var f requestFields
	err := scanObject(body, func(key string, val []byte) error {
		var dst any
		want := "a boolean"
		switch key {
		case "model":
			dst, want = &f.Model, "a string"
		case "prompt":
			if f.Prompt = val; len(val) == 0 || val[0] != '[' {
				f.promptIDs = nil // a later "prompt" replaces an earlier id list
			}
			return nil
		case "stream":
			dst = &f.Stream
		case "priority":
			v, err := decodeInt(key, val)
			f.Priority = v
			return err
		case "max_tokens", "max_completion_tokens", "n":
			v, err := decodeInt(key, val)
			switch key {
			case "max_tokens":
				f.MaxTokens = v
			case "max_completion_tokens":
				f.MaxCompletionTokens = v
			default:
				f.N = v
			}
			return err
		case "messages":
			f.Messages = val
			return nil
		case "tools":
			f.Tools = val
			return nil
		case "chat_template_kwargs":
			f.ChatTemplateKwargs = val
			return nil
		case "add_generation_prompt":
			dst = &f.AddGenerationPrompt
		case "continue_final_message":
			dst = &f.ContinueFinalMessage
		case "cache_salt":
			dst, want = &f.CacheSalt, "a string"
		default:
			return nil
		}
		if err := json.Unmarshal(val, dst); err != nil {
			return badType(key, want)
		}
		return nil
	}, func(key string, b []byte, i int) (int, bool) {
		if key != "prompt" || i >= len(b) || b[i] != '[' {
			return 0, false
		}
		ids, end, err := scanIDs(b, i)
		if err != nil {
			f.promptIDs = nil
			return 0, false // not an id list, or malformed: the generic scanner decides
		}
		f.promptIDs = ids
		return end, true
	})
	return f, err
}
