package chattemplate

import "strings"

// The template engine's tojson escapes U+2028 and U+2029 as \u2028 and
// \u2029 (Go's encoding/json does, for JavaScript embedding), while
// Python's json.dumps(ensure_ascii=False), which HuggingFace uses, and the
// JavaScript reference leave them as they are. When the input holds either
// character, Render swaps them for private-use stand-ins while decoding
// (same UTF-8 length, one code point each, printed verbatim by tojson) and
// swaps them back in the output. The stand-ins are used only when they do
// not occur in the input or the template; otherwise the input renders with
// the engine's escaping. Known residue: str.strip()/split() without
// arguments treat U+2028 as whitespace in Python but not the stand-in.
const (
	lineSep      = '\u2028'
	paraSep      = '\u2029'
	lineSepStand = '\ue028'
	paraSepStand = '\ue029'
)

var (
	toStandIns   = strings.NewReplacer(string(lineSep), string(lineSepStand), string(paraSep), string(paraSepStand))
	fromStandIns = strings.NewReplacer(string(lineSepStand), string(lineSep), string(paraSepStand), string(paraSep))
)

// str applies the stand-in swap when enabled and records what it saw.
func (d *decoder) str(s string) string {
	// The separators and the stand-ins all end in 0x80 0xA8 or 0x80 0xA9
	// in UTF-8; strings without those byte pairs skip the closer look.
	if !strings.Contains(s, "\x80\xa8") && !strings.Contains(s, "\x80\xa9") {
		return s
	}
	if strings.ContainsRune(s, lineSep) || strings.ContainsRune(s, paraSep) {
		d.sawSep = true
	}
	if strings.ContainsRune(s, lineSepStand) || strings.ContainsRune(s, paraSepStand) {
		d.sawStandIn = true
	}
	if d.seps {
		return toStandIns.Replace(s)
	}
	return s
}

// hasStandIn reports whether s holds a stand-in already.
func hasStandIn(s string) bool {
	return strings.ContainsRune(s, lineSepStand) || strings.ContainsRune(s, paraSepStand)
}
