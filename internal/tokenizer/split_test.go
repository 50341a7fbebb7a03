package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// splitAlphabet holds the characters that decide the split patterns'
// behaviour: every class (letters of several scripts, numbers of several
// kinds, each kind of white space, CR/LF, punctuation, symbols, marks) and
// the letters of the contractions in both cases.
var splitAlphabet = []rune("aAsStTrReEvVmMlLdDxZ'' \t\n\r\v\f\u0085\u00a0\u3000\u2028\u200b\ufeff" +
	"09\u0663\uff11\u00b2\u216b\u00bd.,!?-_()<>|/\\\"#@$%&*+=`~{}[]:;" +
	"\u00e9\u0301\u4f60\u597d\u3002\u30ab\uac00\u0645\u05e9\u0928\u094d\U0001F600\U0001F3FD\u200d\ufe0f\u2019")

func genSplitText(t *rapid.T) string {
	rs := rapid.SliceOfN(rapid.SampledFrom(splitAlphabet), 0, 40).Draw(t, "runes")
	return string(rs)
}

// TestFastSplitMatchesRegexp checks the hand-written splitter against
// regexp2 running the original patterns, on random text over splitAlphabet.
func TestFastSplitMatchesRegexp(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		digits  int
	}{{qwenPattern, 1}, {llama3Pattern, 3}} {
		re, err := newRegexpSplitter(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		fast := &fastSplitter{maxDigits: tc.digits}
		rapid.Check(t, func(t *rapid.T) {
			s := genSplitText(t)
			want := re.appendEnds(nil, s)
			got := fast.appendEnds(nil, s)
			if !slices.Equal(got, want) {
				t.Fatalf("digits=%d %q:\n fast  %q\n regex %q", tc.digits, s, pieces(s, got), pieces(s, want))
			}
		})
	}
}

func pieces(s string, ends []int) []string {
	var out []string
	start := 0
	for _, e := range ends {
		out = append(out, s[start:e])
		start = e
	}
	return out
}

// TestSplitExamples pins worked examples of the Qwen3 split.
func TestSplitExamples(t *testing.T) {
	f := &fastSplitter{maxDigits: 1}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"Hello  world", []string{"Hello", " ", " world"}},
		{"I'm here", []string{"I", "'m", " here"}},
		{"a \n\n b", []string{"a", " \n\n", " b"}},
		{"x   ", []string{"x", "   "}},
		{"123", []string{"1", "2", "3"}},
		{"(hello)", []string{"(hello", ")"}},
		{" ...\n\nx", []string{" ...\n\n", "x"}},
		{"你好，世界", []string{"你好", "，世界"}},
	} {
		got := pieces(tc.in, f.appendEnds(nil, tc.in))
		if !slices.Equal(got, tc.want) {
			t.Errorf("split(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	l3 := &fastSplitter{maxDigits: 3}
	if got := pieces("12345", l3.appendEnds(nil, "12345")); !slices.Equal(got, []string{"123", "45"}) {
		t.Errorf("llama3 split(12345) = %q", got)
	}
}

// FuzzFastSplitMatchesRegexp is the fuzz form of TestFastSplitMatchesRegexp
// for arbitrary (valid UTF-8) input.
func FuzzFastSplitMatchesRegexp(f *testing.F) {
	for _, s := range []string{"Hello  world", "I'M here\r\n\r\n  x", "a \u00a0b", "123 4567", "'s'T're", "\u4f60\u597d\n"} {
		f.Add(s)
	}
	re, err := newRegexpSplitter(qwenPattern)
	if err != nil {
		f.Fatal(err)
	}
	re3, err := newRegexpSplitter(llama3Pattern)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		if got, want := (&fastSplitter{maxDigits: 1}).appendEnds(nil, s), re.appendEnds(nil, s); !slices.Equal(got, want) {
			t.Fatalf("qwen %q:\n fast  %q\n regex %q", s, pieces(s, got), pieces(s, want))
		}
		if got, want := (&fastSplitter{maxDigits: 3}).appendEnds(nil, s), re3.appendEnds(nil, s); !slices.Equal(got, want) {
			t.Fatalf("llama3 %q:\n fast  %q\n regex %q", s, pieces(s, got), pieces(s, want))
		}
	})
}

// FuzzDeepSeekSplitMatchesRegexp checks the hand-written splitters of
// DeepSeek V3's three Split patterns against regexp2.
func FuzzDeepSeekSplitMatchesRegexp(f *testing.F) {
	for _, s := range []string{"Hello  world", "x.Method(a) ,b ;c", "中文English混合123456日本語ひらがなカタカナ", "e\u0301 a\u0300 \u0915\u094d", "  \r\n\t x\n\n", "1234567 x²³", "\x01a \u200dz 🫠!", "' s \"q\" ...\n"} {
		f.Add(s)
	}
	var res []*regexpSplitter
	for _, p := range []string{deepseekDigits, deepseekCJK, deepseekWords} {
		re, err := newRegexpSplitter(p)
		if err != nil {
			f.Fatal(err)
		}
		res = append(res, re)
	}
	fast := []splitter{digitGroupSplitter{}, cjkSplitter{}, deepseekWordSplitter{}}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		for k := range fast {
			if got, want := fast[k].appendEnds(nil, s), res[k].appendEnds(nil, s); !slices.Equal(got, want) {
				t.Fatalf("pattern %d %q:\n fast  %q\n regex %q", k, s, pieces(s, got), pieces(s, want))
			}
		}
	})
}

// TestDeepSeekUsesFastSplitters checks that DeepSeek V3's file gets the
// hand-written splitters (its patterns are the constants).
func TestDeepSeekUsesFastSplitters(t *testing.T) {
	tok := familyTokenizer(t, "deepseek-v3", true)
	var kinds []string
	for _, st := range tok.stages {
		kinds = append(kinds, fmt.Sprintf("%T", st.split))
	}
	want := []string{"tokenizer.digitGroupSplitter", "tokenizer.cjkSplitter", "tokenizer.deepseekWordSplitter"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("stages %v, want %v", kinds, want)
	}
}

// TestDeepSeekSplitMatchesRegexp checks DeepSeek V3's hand-written
// splitters against regexp2 on random text over splitAlphabet plus the
// edges of the CJK ranges, control and format characters.
func TestDeepSeekSplitMatchesRegexp(t *testing.T) {
	alphabet := append([]rune("\u4e00\u9fa5\u9fa6\u3040\u309f\u30a0\u30ff\u3100\u3001\x01\x7f\u00ad\ue000"), splitAlphabet...)
	for k, p := range []string{deepseekDigits, deepseekCJK, deepseekWords} {
		re, err := newRegexpSplitter(p)
		if err != nil {
			t.Fatal(err)
		}
		fast := []splitter{digitGroupSplitter{}, cjkSplitter{}, deepseekWordSplitter{}}[k]
		rapid.Check(t, func(t *rapid.T) {
			s := string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 40).Draw(t, "runes"))
			if got, want := fast.appendEnds(nil, s), re.appendEnds(nil, s); !slices.Equal(got, want) {
				t.Fatalf("pattern %d %q:\n fast  %q\n regex %q", k, s, pieces(s, got), pieces(s, want))
			}
		})
	}
}

// TestO200kSplitMatchesRegexp checks the o200k splitter against regexp2
// on random text over splitAlphabet plus title-case, modifier and other
// letters, marks and '/'.
func TestO200kSplitMatchesRegexp(t *testing.T) {
	alphabet := append([]rune("\u01c5\u02b0\u00aa\u05d0\u0301\u0903/ABab'sS\u017f\u212a"), splitAlphabet...)
	re, err := newRegexpSplitter(o200kPattern)
	if err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(t *rapid.T) {
		s := string(rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 40).Draw(t, "runes"))
		if got, want := (o200kSplitter{}).appendEnds(nil, s), re.appendEnds(nil, s); !slices.Equal(got, want) {
			t.Fatalf("%q:\n fast  %q\n regex %q", s, pieces(s, got), pieces(s, want))
		}
	})
}

// FuzzO200kSplitMatchesRegexp is TestO200kSplitMatchesRegexp on arbitrary
// (valid UTF-8) input.
func FuzzO200kSplitMatchesRegexp(f *testing.F) {
	for _, s := range []string{"HelloWorld  x", "I'M here\r\n/x", "ǅungla ʰa ªb", "123 4567", "e\u0301 \u0903a"} {
		f.Add(s)
	}
	re, err := newRegexpSplitter(o200kPattern)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(s, "\uFFFD")
		if got, want := (o200kSplitter{}).appendEnds(nil, s), re.appendEnds(nil, s); !slices.Equal(got, want) {
			t.Fatalf("%q:\n fast  %q\n regex %q", s, pieces(s, got), pieces(s, want))
		}
	})
}

// TestGptOssUsesFastSplitter checks that gpt-oss's file gets the o200k
// splitter (its pattern is the constant).
func TestGptOssUsesFastSplitter(t *testing.T) {
	tok := familyTokenizer(t, "gpt-oss", true)
	if len(tok.stages) == 0 {
		t.Fatal("no stages")
	}
	if _, ok := tok.stages[0].split.(o200kSplitter); !ok {
		t.Fatalf("first stage splits with %T", tok.stages[0].split)
	}
}
