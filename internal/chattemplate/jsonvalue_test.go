package chattemplate

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// node is an ordered JSON tree, the test's own model of a request value.
type node struct {
	kind  byte // n(ull) b(ool) i(nt) f(loat) s(tring) l(ist) o(bject)
	b     bool
	i     int64
	f     float64
	s     string
	items []node
	keys  []string
}

func genString(t *rapid.T, label string) string {
	s := rapid.OneOf(
		rapid.StringMatching(`[a-z_]{0,8}`),
		rapid.String(),
		rapid.SampledFrom([]string{"\u2028", "a\u2029b", "é<>&", "\"\\/", "\x00\x01\b\f\n\r\t\x1f\x7f", "東京👩‍👧", "\ufeff"}),
	).Draw(t, label)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return s
}

func genNode(t *rapid.T, depth int) node {
	kinds := "nbifs"
	if depth < 4 {
		kinds += "lo"
	}
	switch k := rapid.SampledFrom([]byte(kinds)).Draw(t, "kind"); k {
	case 'n':
		return node{kind: k}
	case 'b':
		return node{kind: k, b: rapid.Bool().Draw(t, "b")}
	case 'i':
		return node{kind: k, i: rapid.Int64().Draw(t, "i")}
	case 'f':
		// Positional range of Python's float repr (|f| < 1e16); the
		// exponent forms are covered by TestPyFloatRepr.
		q := rapid.Int64Range(-1e15, 1e15).Draw(t, "q")
		return node{kind: k, f: float64(q) + rapid.SampledFrom([]float64{0, 0.5, 0.25, 0.125}).Draw(t, "frac")}
	case 's':
		return node{kind: k, s: genString(t, "s")}
	case 'l':
		n := rapid.IntRange(0, 4).Draw(t, "n")
		out := node{kind: k}
		for range n {
			out.items = append(out.items, genNode(t, depth+1))
		}
		return out
	default:
		keys := rapid.SliceOfNDistinct(rapid.Custom(func(t *rapid.T) string { return genString(t, "key") }), 0, 5, func(s string) string { return s }).Draw(t, "keys")
		out := node{kind: 'o', keys: keys}
		for range keys {
			out.items = append(out.items, genNode(t, depth+1))
		}
		return out
	}
}

// compact writes n as compact JSON (Go escaping, any valid form will do).
func (n node) compact(sb *strings.Builder) {
	switch n.kind {
	case 'n':
		sb.WriteString("null")
	case 'b':
		sb.WriteString(strconv.FormatBool(n.b))
	case 'i':
		sb.WriteString(strconv.FormatInt(n.i, 10))
	case 'f':
		sb.WriteString(strconv.FormatFloat(n.f, 'e', -1, 64))
	case 's':
		b, _ := json.Marshal(n.s)
		sb.Write(b)
	case 'l':
		sb.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				sb.WriteByte(',')
			}
			it.compact(sb)
		}
		sb.WriteByte(']')
	case 'o':
		sb.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			b, _ := json.Marshal(k)
			sb.Write(b)
			sb.WriteByte(':')
			n.items[i].compact(sb)
		}
		sb.WriteByte('}')
	}
}

// pyString is Python's json.dumps(s, ensure_ascii=False) for one string.
func pyString(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// python writes n as Python's json.dumps does by default (", " and ": ").
func (n node) python(sb *strings.Builder) {
	switch n.kind {
	case 'n':
		sb.WriteString("null")
	case 'b':
		sb.WriteString(strconv.FormatBool(n.b))
	case 'i':
		sb.WriteString(strconv.FormatInt(n.i, 10))
	case 'f':
		s := strconv.FormatFloat(n.f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0" // Python writes integral floats as 2.0
		}
		sb.WriteString(s)
	case 's':
		sb.WriteString(pyString(n.s))
	case 'l':
		sb.WriteByte('[')
		for i, it := range n.items {
			if i > 0 {
				sb.WriteString(", ")
			}
			it.python(sb)
		}
		sb.WriteByte(']')
	case 'o':
		sb.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(pyString(k))
			sb.WriteString(": ")
			n.items[i].python(sb)
		}
		sb.WriteByte('}')
	}
}

// Any JSON value handed in keeps its key order and prints through tojson
// exactly as Python's json.dumps would, including U+2028/U+2029.
func TestToJSONMatchesPythonDumps(t *testing.T) {
	tmpl, err := Compile(`{{ v|tojson }}`, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		n := genNode(t, 0)
		var in, want strings.Builder
		in.WriteString(`{"v":`)
		n.compact(&in)
		in.WriteString(`}`)
		n.python(&want)
		got, err := tmpl.Render(raw(oneMsg), nil, Options{Kwargs: json.RawMessage(in.String())})
		if err != nil {
			t.Fatalf("Render(%s): %v", in.String(), err)
		}
		if got != want.String() {
			t.Fatalf("input %s\n got %s\nwant %s", in.String(), got, want.String())
		}
	})
}

func TestDuplicateKeysKeepFirstPositionLastValue(t *testing.T) {
	tmpl, err := Compile(`{{ v|tojson }}`, SpecialTokens{}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := mustRender(t, tmpl, oneMsg, "", Options{Kwargs: json.RawMessage(`{"v": {"a": 1, "b": 2, "a": 3}}`)})
	if got != `{"a": 3, "b": 2}` {
		t.Fatalf("got %s", got)
	}
}

// toAny converts a decoded value to encoding/json's generic form.
func toAny(v jinja.Value) any {
	switch {
	case v.IsNone():
		return nil
	case v.IsBool():
		return v.AsBool()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.IsString():
		return v.AsString()
	case v.IsList():
		out := []any{}
		for _, it := range v.AsList().Items {
			out = append(out, toAny(it))
		}
		return out
	case v.IsDict():
		out := map[string]any{}
		for _, k := range v.AsDict().Keys {
			out[k] = toAny(v.AsDict().Data[k])
		}
		return out
	}
	return "undefined"
}

// The hand-written decoder accepts exactly what encoding/json accepts and
// yields the same values (the independent reference).
func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,-0,1e3,"x\u00e9\ud83d\ude00\ud800"],"b":{"a":null}}`, `"\u0041\/\b"`, `[1,]`, `01`, `-`, `1.`, `1e`, `"\x01"`, "\"\xff\"", `{"a":1,"a":2}`, ` [ ] `, `nul`, `"\uD800\u0041"`, `"\ud800\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeValue(b, 10000)
		var want any
		werr := json.Unmarshal(b, &want)
		if (err == nil) != (werr == nil) {
			// encoding/json rejects numbers it cannot represent as errors
			// of type UnmarshalTypeError only for typed targets; for any it
			// parses them, and so do we, except out-of-range floats.
			t.Fatalf("input %q: ours err=%v, encoding/json err=%v", b, err, werr)
		}
		if err != nil {
			return
		}
		if got := toAny(v); !cmp.Equal(got, want) {
			t.Fatalf("input %q: %s", b, cmp.Diff(want, got))
		}
	})
}

func TestDecodeMatchesEncodingJSONSeeds(t *testing.T) {
	for _, s := range []string{`{"a":[1,2.5,-0,1e3,"x\u00e9\ud83d\ude00\ud800"],"b":{"a":null}}`, `"\ud800\u0041"`, `"\ud800\ud800"`, "\"a\xffb\\n\xc3\"", `9007199254740993`, `-9223372036854775809`, `1E400`} {
		v, err := decodeValue([]byte(s), 100)
		var want any
		werr := json.Unmarshal([]byte(s), &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%s: ours %v, encoding/json %v", s, err, werr)
		}
		if err == nil && !cmp.Equal(toAny(v), want) {
			t.Fatalf("%s: %s", s, cmp.Diff(want, toAny(v)))
		}
	}
}
