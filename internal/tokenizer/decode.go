package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Decoder step kinds (HuggingFace decoders the supported families use).
const (
	decByteLevel = iota
	decReplace
	decByteFallback
	decFuse
	decStrip
	decMetaspace
)

// decStep is one step of a decoder Sequence, applied to the list of token
// strings as HuggingFace's decode_chain does.
type decStep struct {
	kind        int
	from, to    string // Replace
	content     rune   // Strip
	start, stop int    // Strip
	replacement rune   // Metaspace
	prepend     bool   // Metaspace: prepend_scheme is not "never"
}

// decodeChain turns ids into text through the decoder steps: each id's
// token as written in the file, then each step over the list, then the
// pieces joined.
func (t *Tokenizer) decodeChain(ids []uint32) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		if int(id) < t.idToken.len() && t.known[id] {
			toks = append(toks, t.idToken.at(int(id)))
		}
	}
	if len(t.dec) == 0 { // no decoder: HuggingFace joins the tokens with spaces
		return validUTF8(strings.Join(toks, " "))
	}
	for _, st := range t.dec {
		toks = st.apply(toks)
	}
	return validUTF8(strings.Join(toks, ""))
}

func (st *decStep) apply(toks []string) []string {
	switch st.kind {
	case decReplace:
		for i, s := range toks {
			toks[i] = strings.ReplaceAll(s, st.from, st.to)
		}
	case decFuse:
		return []string{strings.Join(toks, "")}
	case decByteLevel:
		var buf []byte
		for _, s := range toks {
			raw, _ := byteLevelDecode(s)
			buf = append(buf, raw...)
		}
		return []string{string(appendLossy(nil, buf))}
	case decByteFallback:
		return byteFallbackDecode(toks)
	case decStrip:
		for i, s := range toks {
			toks[i] = stripToken(s, st.content, st.start, st.stop)
		}
	case decMetaspace:
		for i, s := range toks {
			var b strings.Builder
			for _, r := range s {
				if r == st.replacement {
					if i == 0 && st.prepend {
						continue
					}
					r = ' '
				}
				b.WriteRune(r)
			}
			toks[i] = b.String()
		}
	}
	return toks
}

// byteFallbackDecode replaces each run of <0xXX> tokens by the text of its
// bytes when they are valid UTF-8, else by one U+FFFD per byte.
func byteFallbackDecode(toks []string) []string {
	out := make([]string, 0, len(toks))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, s := range toks {
		if b, ok := byteToken(s); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, s)
	}
	flush()
	return out
}

// byteToken parses a byte-fallback token "<0xXX>" (upper-case hex).
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// stripToken removes up to start leading and stop trailing content
// characters of s.
func stripToken(s string, content rune, start, stop int) string {
	r := []rune(s)
	i := 0
	for i < start && i < len(r) && r[i] == content {
		i++
	}
	j := len(r)
	for k := 0; k < stop && j > i && r[j-1] == content; k++ {
		j--
	}
	return string(r[i:j])
}
