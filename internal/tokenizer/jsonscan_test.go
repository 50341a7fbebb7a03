package tokenizer

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzScannerStr: the tokenizer.json scanner reads strings as encoding/json
// does (on valid UTF-8 input, where HuggingFace's repair does not apply).
func FuzzScannerStr(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b\\\/"`, `"\u00e9\ud83d\ude00"`, `"\ud800x"`, `"unterminated`, `"bad \q"`, "\"\x01\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return
		}
		s := &scanner{b: b}
		got, err := s.str()
		if err == nil && s.i < len(b) {
			return // a string followed by more: encoding/json would refuse the document
		}
		var want string
		jerr := json.Unmarshal(b, &want)
		if len(bytes.TrimLeft(b, " \t\r\n")) > 0 && bytes.TrimLeft(b, " \t\r\n")[0] != '"' {
			return // not a string at all: both refuse, differently
		}
		if (err == nil) != (jerr == nil) || got != want {
			t.Fatalf("str(%q) = %q, %v; encoding/json %q, %v", b, got, err, want, jerr)
		}
		// rawStr agrees.
		s = &scanner{b: b}
		raw, err := s.rawStr()
		if (err == nil) != (jerr == nil) || string(raw) != want {
			t.Fatalf("rawStr(%q) = %q, %v; encoding/json %q, %v", b, raw, err, want, jerr)
		}
	})
}
