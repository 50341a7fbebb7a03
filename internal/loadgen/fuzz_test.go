package loadgen

import (
	"bufio"
	"strings"
	"testing"
)

func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{`[DONE]`, `{"choices":[{"text":"a"}]}`, `{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}`, `{"error":{"message":"m"}}`, `{`, `null`, `{"choices":null,"usage":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, done, err := parseChunk([]byte(s))
		if done && err != nil {
			t.Fatal("done with an error")
		}
		if c.tokens() < 0 || c.tokens() > len(c.Choices) {
			t.Fatal("token count out of range")
		}
		r := bufio.NewReaderSize(strings.NewReader(s), 16)
		for {
			if _, err := readLine(r); err != nil {
				break
			}
		}
	})
}
