package jsontext

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"
)

// check compares the package with encoding/json, the independent
// expectation, on one input.
func check(t testing.TB, lit []byte) {
	lit = bytes.Trim(lit, " \t\r\n") // json allows white space around; String does not
	var want string
	werr := json.Unmarshal(lit, &want)
	isLit := len(lit) > 0 && lit[0] == '"' // json also accepts other values and white space
	got, err := String(lit)
	if isLit && (err == nil) != (werr == nil) {
		t.Fatalf("String(%q) err %v, encoding/json %v", lit, err, werr)
	}
	if err != nil {
		if !errors.Is(err, ErrSyntax) {
			t.Fatalf("String(%q) error %v does not wrap ErrSyntax", lit, err)
		}
		return
	}
	if got != want {
		t.Fatalf("String(%q) = %q, encoding/json %q", lit, got, want)
	}
	// Scan agrees on the extent, with or without bytes after the string.
	end, esc, err := Scan(append(bytes.Clone(lit), `,"x"]`...), 0)
	if err != nil || end != len(lit) {
		t.Fatalf("Scan(%q) = %d, %v; want %d", lit, end, err, len(lit))
	}
	body := lit[1 : len(lit)-1]
	if esc != (bytes.IndexByte(body, '\\') >= 0) {
		t.Fatalf("Scan(%q) escaped = %v", lit, esc)
	}
	// Plain: the bytes are the value exactly when it says so.
	if Plain(body) != (!esc && utf8.Valid(body)) {
		t.Fatalf("Plain(%q) = %v", body, Plain(body))
	}
	// AppendUnescaped then encoding/json's UTF-8 repair is String.
	raw, err := AppendUnescaped([]byte("prefix"), lit)
	if err != nil || string(AppendValid(nil, raw[len("prefix"):])) != want || string(raw[:6]) != "prefix" {
		t.Fatalf("AppendUnescaped(%q) = %q, %v; want %q", lit, raw, err, want)
	}
}

func TestExamples(t *testing.T) {
	for _, s := range []string{
		`""`, `"a"`, `"hello, world: a long plain string over eight bytes"`,
		`"tab\there"`, `"\"quoted\" and \\ back\/slash"`, `"\b\f\n\r\t"`,
		`"\u00e9\u4e2d"`, `"\ud83d\ude00 pair"`, `"\ud83d lone high"`, `"\ude00 lone low"`,
		`"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`, "\"bad \xff utf8\"", "\"cut \xe4\xb8\"",
		`"unterminated`, `"bad \x"`, `"bad \u12"`, `"bad \u12g4"`, "\"ctl \x01\"", `"\`, `"`, ``, `x`,
		`"` + strings.Repeat("abcdefgh", 10) + `\n` + strings.Repeat("é", 9) + `"`,
		`"trailing" `, `"a"b`,
	} {
		check(t, []byte(s))
	}
}

// TestSpecialMatchesBytewise: the word test finds exactly the words that
// hold a quote, a backslash or a control character.
func TestSpecialMatchesBytewise(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 1, 0x1f, 0x20, 0x21, '"', '#', '\\', ']', 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a'}), 8, 8).Draw(t, "word")
		want := false
		for _, c := range b {
			want = want || c == '"' || c == '\\' || c < 0x20
		}
		if got := special(binary.LittleEndian.Uint64(b)); got != want {
			t.Fatalf("special(%q) = %v, want %v", b, got, want)
		}
	})
}

// TestScanErrorsLocate: errors point into the input.
func TestScanErrorsLocate(t *testing.T) {
	for _, tc := range []struct {
		in string
		at int
	}{{`"abc`, 4}, {"\"abcdefghij\x02\"", 11}, {`"ab\qc"`, 4}, {`"ab\u12x4"`, 7}, {`x`, 0}} {
		_, _, err := Scan([]byte(tc.in), 0)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Offset != tc.at {
			t.Errorf("Scan(%q) = %v, want an error at %d", tc.in, err, tc.at)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{`""`, `"a\u00e9\ud83d\ude00"`, "\"\xff\"", `"\ud800"`, `"a\"b"`, `"` + strings.Repeat("x", 20) + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}

func BenchmarkScan(b *testing.B) {
	lit := []byte(`"` + strings.Repeat("the router sends each request to the worker ", 1000) + `"`)
	b.SetBytes(int64(len(lit)))
	for b.Loop() {
		if _, _, err := Scan(lit, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSkipSpace(t *testing.T) {
	for _, tc := range []struct {
		in   string
		from int
		want int
	}{{"", 0, 0}, {"  \t\r\nx ", 0, 5}, {"x  ", 1, 3}, {"a\v b", 1, 1}, {" \u00a0", 0, 1}} {
		if got := SkipSpace([]byte(tc.in), tc.from); got != tc.want {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", tc.in, tc.from, got, tc.want)
		}
	}
}
