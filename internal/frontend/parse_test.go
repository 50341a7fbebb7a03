package frontend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/chattemplate"

	"pgregory.net/rapid"
)

// tokenIDs agrees with encoding/json decoding into []uint32 (the
// independent expectation) on what it accepts and what it returns.
func checkTokenIDs(t interface{ Fatalf(string, ...any) }, raw []byte) {
	got, err := tokenIDs(raw)
	var want []uint32
	jerr := json.Unmarshal(raw, &want)
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		jerr = errNull
	}
	if (err == nil) != (jerr == nil) {
		t.Fatalf("%q: tokenIDs err %v, encoding/json err %v", raw, err, jerr)
	}
	if err == nil && !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("%q: tokenIDs %v, encoding/json %v", raw, got, want)
	}
}

var errNull = json.Unmarshal([]byte("1"), new(string))

func FuzzTokenIDs(f *testing.F) {
	for _, s := range []string{`[]`, `[1,2,3]`, ` [ 0 , 4294967295 ] `, `[4294967296]`, `[-1]`, `[1.0]`, `[1e3]`, `[01]`, `[1,]`, `[,1]`, `[1 2]`, `[1]x`, `null`, `["1"]`, "[\t1\n,\r2]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkTokenIDs(t, raw) })
}

func TestTokenIDsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOf(rapid.Uint32()).Draw(t, "ids")
		ws := rapid.SampledFrom([]string{"", " ", "\n", "\t ", "\r\n"})
		var b bytes.Buffer
		b.WriteString(ws.Draw(t, "ws0") + "[")
		for i, id := range ids {
			if i > 0 {
				b.WriteString(ws.Draw(t, "wsa") + ",")
			}
			b.WriteString(ws.Draw(t, "wsb"))
			b.WriteString(uitoa(id))
		}
		b.WriteString(ws.Draw(t, "ws1") + "]" + ws.Draw(t, "ws2"))
		got, err := tokenIDs(b.Bytes())
		if err != nil || !slices.Equal(got, ids) && len(ids) > 0 {
			t.Fatalf("%q: %v %v, want %v", b.String(), got, err, ids)
		}
		// Corrupt one byte: both decoders still agree.
		raw := b.Bytes()
		if len(raw) > 0 {
			i := rapid.IntRange(0, len(raw)-1).Draw(t, "at")
			raw[i] = rapid.SampledFrom([]byte("-.e0]x,[ \"")).Draw(t, "byte")
			checkTokenIDs(t, raw)
		}
	})
}

func uitoa(v uint32) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCompletionPromptForms(t *testing.T) {
	tok := testTokenizer(t)
	p := promptParser{model: "m", tok: tok, maxTokens: 1000, maxTokenBytes: longestToken(tok)}
	hello := tok.Encode("hello world", true)
	cases := []struct {
		raw     string
		tokens  []uint32
		fromIDs bool
		batch   int
	}{
		{`"hello world"`, hello, false, 1},
		{`[1, 2, 3]`, []uint32{1, 2, 3}, true, 1},
		{`["hello world", "other"]`, hello, false, 2},
		{`[[5, 6], [7]]`, []uint32{5, 6}, true, 2},
	}
	for _, c := range cases {
		got, err := p.completionPrompt([]byte(c.raw))
		if err != nil || !slices.Equal(got.tokens, c.tokens) || got.fromIDs != c.fromIDs || got.batch != c.batch {
			t.Fatalf("%s: %+v %v", c.raw, got, err)
		}
	}
	for _, raw := range []string{`[[[1]]]`, `[["a"]]`, `["a", 1]`, `[1, "a"]`, `[]`, `{}`, `3`} {
		if _, err := p.completionPrompt([]byte(raw)); err == nil && raw != `["a", 1]` {
			t.Fatalf("%s accepted", raw)
		}
	}
}

func TestWithTokenIDs(t *testing.T) {
	out, err := withTokenIDs([]byte(`{"model":"m","prompt":"hi","stream":true,"extra":{"k":[1]}}`), []uint32{7, 8})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	if p, _ := json.Marshal(m["prompt"]); string(p) != "[7,8]" || m["stream"] != true || m["model"] != "m" || m["extra"] == nil {
		t.Fatalf("rewritten body %s", out)
	}
}

// chatRequest (from the scanned fields) and chattemplate.ParseChatRequest
// (decoding the whole body) accept the same bodies and give the same
// request.
func TestChatRequestMatchesParseChatRequest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		vals := map[string][]string{
			"model":                  {`"m"`, `""`},
			"messages":               {`[{"role":"user","content":"hi"}]`, `[]`, `"x"`, `null`, `{}`},
			"tools":                  {`[{"type":"function"}]`, `null`, `{}`, `[]`},
			"chat_template_kwargs":   {`{"enable_thinking":false}`, `null`, `[]`},
			"add_generation_prompt":  {`true`, `false`, `null`},
			"continue_final_message": {`true`, `false`},
			"stream":                 {`true`, `false`},
		}
		keys := []string{"model", "messages", "tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "stream"}
		var parts []string
		for _, k := range keys {
			if rapid.Bool().Draw(t, "has "+k) {
				parts = append(parts, `"`+k+`":`+rapid.SampledFrom(vals[k]).Draw(t, k))
			}
		}
		body := []byte("{" + strings.Join(parts, ",") + "}")
		want, werr := chattemplate.ParseChatRequest(body)
		f, err := parseFields(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		got, gerr := chatRequest(&f)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%s: chatRequest err %v, ParseChatRequest err %v", body, gerr, werr)
		}
		if gerr != nil {
			return
		}
		norm := func(r json.RawMessage) string {
			if string(r) == "null" {
				return ""
			}
			return string(r)
		}
		if got.Model != want.Model || string(got.Messages) != string(want.Messages) || norm(got.Tools) != norm(want.Tools) ||
			norm(got.ChatTemplateKwargs) != norm(want.ChatTemplateKwargs) || got.ContinueFinalMessage != want.ContinueFinalMessage ||
			got.Stream != want.Stream || (got.AddGenerationPrompt == nil) != (want.AddGenerationPrompt == nil) ||
			(got.AddGenerationPrompt != nil && *got.AddGenerationPrompt != *want.AddGenerationPrompt) || got.Options().AddGenerationPrompt != want.Options().AddGenerationPrompt {
			t.Fatalf("%s: got %+v, want %+v", body, got, want)
		}
	})
}

// TestDigitWords checks the word-at-a-time digit reading against a byte
// loop and strconv, on words mixing digits with their neighbours in ASCII.
func TestDigitWords(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.SampledFrom([]byte("0123456789/:?,] \xff\x00\xf9")), 8, 8).Draw(t, "word")
		want := 0
		for want < 8 && b[want] >= '0' && b[want] <= '9' {
			want++
		}
		x := binary.LittleEndian.Uint64(b)
		if got := leadingDigits(x); got != want {
			t.Fatalf("leadingDigits(%q) = %d, want %d", b, got, want)
		}
		if want > 0 && want < 8 {
			v, _ := strconv.ParseUint(string(b[:want]), 10, 32)
			if got := digitsValue(x, want); got != uint32(v) {
				t.Fatalf("digitsValue(%q, %d) = %d, want %d", b, want, got, v)
			}
		}
	})
}

// TestTokenIDsSmall: lists of vocabulary-sized ids (the fast path), with
// and without white space, decode to themselves.
func TestTokenIDsSmall(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ids := rapid.SliceOfN(rapid.Uint32Range(0, 9999999), 1, 50).Draw(t, "ids")
		sep := rapid.SampledFrom([]string{",", ", ", " ,", ",\n"}).Draw(t, "sep")
		var b bytes.Buffer
		b.WriteString("[")
		for i, id := range ids {
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(uitoa(id))
		}
		b.WriteString("]")
		checkTokenIDs(t, b.Bytes())
		got, err := tokenIDs(b.Bytes())
		if err != nil || !slices.Equal(got, ids) {
			t.Fatalf("%q: %v %v", b.String(), got, err)
		}
	})
}
