package chattemplate

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/ardanlabs/jinja"
)

// toJSONFilter is the name the tojson filter is renamed to in compiled
// templates (see rewriteToJSON). The engine looks unknown filter names up in
// the render variables, where Render puts pyToJSON under this name.
const toJSONFilter = "kvrouter_tojson"

// pyToJSON is the tojson filter as transformers defines it for chat
// templates: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), with those keyword arguments honoured.
// The engine's own tojson differs from Python in ways that change prompts:
// floats of 1e6 and above print in exponent form ("1.0000005e+06"), U+2028
// and U+2029 are escaped, indent loses key order. This one follows
// Python's json module and float repr exactly for values decoded from JSON.
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson: missing value")
	}
	e := pyEncoder{itemSep: ", ", keySep: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64))))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string")
		}
		e.indented = true
		e.itemSep = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be two strings")
		}
		e.itemSep, e.keySep = v.AsList().Items[0].AsString(), v.AsList().Items[1].AsString()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		e.sortKeys = v.IsTruthy()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		e.ascii = v.IsTruthy()
	}
	if err := e.encode(args[0], 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(e.sb.String()), nil
}

type pyEncoder struct {
	sb              strings.Builder
	itemSep, keySep string
	indent          string
	indented        bool
	sortKeys, ascii bool
}

// maxEncodeDepth bounds recursion on values a template builds itself
// (decoded input is already bounded by Config.MaxDepth).
const maxEncodeDepth = 512

func (e *pyEncoder) newline(level int) {
	if e.indented {
		e.sb.WriteByte('\n')
		for range level {
			e.sb.WriteString(e.indent)
		}
	}
}

func (e *pyEncoder) encode(v jinja.Value, level int) error {
	if level > maxEncodeDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxEncodeDepth)
	}
	switch {
	case v.IsNone() || v.IsUndefined():
		e.sb.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			e.sb.WriteString("true")
		} else {
			e.sb.WriteString("false")
		}
	case v.IsInt():
		e.sb.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		e.sb.WriteString(pyFloatRepr(v.AsFloat()))
	case v.IsString():
		e.str(v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			e.sb.WriteString("[]")
			return nil
		}
		e.sb.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				e.sb.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			if err := e.encode(it, level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.sb.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			e.sb.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if e.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		e.sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				e.sb.WriteString(e.itemSep)
			}
			e.newline(level + 1)
			e.str(k)
			e.sb.WriteString(e.keySep)
			if err := e.encode(d.Data[k], level+1); err != nil {
				return err
			}
		}
		e.newline(level)
		e.sb.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode a %s", v.String())
	}
	return nil
}

// str writes s as Python's json.dumps does: short escapes for " \ \n \r
// \t \b \f, \u00XX for other control characters, everything else as is
// (or as \uXXXX, with surrogate pairs, when ensure_ascii is on).
func (e *pyEncoder) str(s string) {
	const hex = "0123456789abcdef"
	u := func(r rune) {
		e.sb.WriteString(`\u`)
		e.sb.WriteByte(hex[r>>12&0xf])
		e.sb.WriteByte(hex[r>>8&0xf])
		e.sb.WriteByte(hex[r>>4&0xf])
		e.sb.WriteByte(hex[r&0xf])
	}
	e.sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			e.sb.WriteString(`\"`)
		case '\\':
			e.sb.WriteString(`\\`)
		case '\n':
			e.sb.WriteString(`\n`)
		case '\r':
			e.sb.WriteString(`\r`)
		case '\t':
			e.sb.WriteString(`\t`)
		case '\b':
			e.sb.WriteString(`\b`)
		case '\f':
			e.sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				u(r)
			case e.ascii && r > 0x7e:
				if r >= 0x10000 {
					hi, lo := utf16.EncodeRune(r)
					u(hi)
					u(lo)
				} else {
					u(r)
				}
			default:
				e.sb.WriteRune(r)
			}
		}
	}
	e.sb.WriteByte('"')
}

// pyFloatRepr formats f as Python's repr(float): the shortest digits that
// round-trip, in positional notation when the decimal exponent is in
// [-4, 16) (with ".0" for integral values), otherwise as d.ddde±XX.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		out = mant
		if exp < 0 {
			out += fmt.Sprintf("e-%02d", -exp)
		} else {
			out += fmt.Sprintf("e+%02d", exp)
		}
	} else {
		point := exp + 1 // digits before the decimal point
		switch {
		case point <= 0:
			out = "0." + strings.Repeat("0", -point) + digits
		case point >= len(digits):
			out = digits + strings.Repeat("0", point-len(digits)) + ".0"
		default:
			out = digits[:point] + "." + digits[point:]
		}
	}
	if neg {
		return "-" + out
	}
	return out
}

// rewriteToJSON renames the filters the package replaces (tojson, map and
// trim: see pyFilters) inside the template's {{ }} and {% %} tags (outside
// string literals) to their kvrouter_ names, so that the package's
// versions, passed in the render variables, replace the engine's built-in
// ones. Text outside tags is untouched.
func rewriteToJSON(src string) string {
	found := false
	for _, f := range pyFilters {
		found = found || strings.Contains(src, f.name)
	}
	if !found {
		return src
	}
	var sb strings.Builder
	i := 0
	for i < len(src) {
		open := strings.Index(src[i:], "{")
		if open < 0 || i+open+1 >= len(src) {
			sb.WriteString(src[i:])
			break
		}
		open += i
		next := src[open+1]
		if next != '{' && next != '%' && next != '#' {
			sb.WriteString(src[i : open+1])
			i = open + 1
			continue
		}
		sb.WriteString(src[i : open+2])
		closer := "}}"
		switch next {
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		}
		j := open + 2
		if next == '#' {
			end := strings.Index(src[j:], closer)
			if end < 0 {
				sb.WriteString(src[j:])
				break
			}
			sb.WriteString(src[j : j+end+2])
			i = j + end + 2
			continue
		}
		// Inside a tag: copy, skipping string literals, renaming
		// "| tojson" (and the others) where it is a whole identifier.
		var quote byte
		for j < len(src) {
			c := src[j]
			if quote != 0 {
				sb.WriteByte(c)
				if c == '\\' && j+1 < len(src) {
					sb.WriteByte(src[j+1])
					j += 2
					continue
				}
				if c == quote {
					quote = 0
				}
				j++
				continue
			}
			if c == '\'' || c == '"' {
				quote = c
				sb.WriteByte(c)
				j++
				continue
			}
			if strings.HasPrefix(src[j:], closer) {
				break
			}
			if c == '|' {
				k := j + 1
				for k < len(src) && (src[k] == ' ' || src[k] == '\t' || src[k] == '\n' || src[k] == '\r') {
					k++
				}
				if f, ok := filterAt(src, k); ok {
					sb.WriteString(src[j:k])
					sb.WriteString(f.renamed)
					j = k + len(f.name)
					continue
				}
			}
			sb.WriteByte(c)
			j++
		}
		i = j
	}
	return sb.String()
}

// filterAt returns the replaced filter whose name is the whole identifier
// at src[k:].
func filterAt(src string, k int) (pyFilter, bool) {
	for _, f := range pyFilters {
		if strings.HasPrefix(src[k:], f.name) && (k+len(f.name) == len(src) || !isIdentByte(src[k+len(f.name)])) {
			return f, true
		}
	}
	return pyFilter{}, false
}

func isIdentByte(b byte) bool {
	return b == '_' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}
