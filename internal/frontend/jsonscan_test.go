package frontend

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
)

// checkScan compares scanObject with encoding/json (the independent
// expectation): the same documents are valid objects, and the members
// reported are the ones json decodes (the last of a repeated key wins).
func checkScan(t *testing.T, b []byte) {
	checkScanWith(t, b, nil)
	// With the id-list fast path on every member: the same answer.
	checkScanWith(t, b, func(_ string, b []byte, i int) (int, bool) {
		if i >= len(b) || b[i] != '[' {
			return 0, false
		}
		_, end, err := scanIDs(b, i)
		return end, err == nil
	})
	// parseFields' decoded ids agree with decoding the raw prompt.
	if f, err := parseFields(b); err == nil && f.promptIDs != nil {
		want, err := tokenIDs(f.Prompt)
		if err != nil || !slices.Equal(want, f.promptIDs) {
			t.Fatalf("%q: prompt ids %v, decoding the raw prompt %v (%v)", b, f.promptIDs, want, err)
		}
	}
}

func checkScanWith(t *testing.T, b []byte, fast func(string, []byte, int) (int, bool)) {
	got := map[string]string{}
	err := scanObject(b, func(k string, v []byte) error {
		got[k] = string(v)
		return nil
	}, fast)
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	want := json.Valid(b) && len(trimmed) > 0 && trimmed[0] == '{'
	if (err == nil) != want {
		t.Fatalf("%q: scanObject err %v, json.Valid object %v", b, err, want)
	}
	if err != nil {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	if len(m) != len(got) {
		t.Fatalf("%q: %d members, json %d", b, len(got), len(m))
	}
	for k, v := range m {
		if got[k] != string(v) {
			t.Fatalf("%q: member %q = %q, json %q", b, k, got[k], v)
		}
	}
}

func FuzzScanObject(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a":1} `, `{"a":[1,{"b":null}],"c":"x\"y\u00e9","d":-0.5e+3,"e":true,"f":false}`,
		`{"a":1,"a":2}`, `{"a\n":1}`, `{"a":01}`, `{"a":1,}`, `{"a" 1}`, `{"a":"\x01"}`, `[1]`, `{"a":1}x`, `{"a":tru}`, `{"a":"\ud800"}`,
		`{"prompt":[1,2],"prompt":"x"}`, `{"prompt":"x","prompt":[3]}`, `{"prompt":[1,2]}`, `{"prompt":[1,"a"]}`, `{"prompt":[1,2]]}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":"\q"}`, "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(checkScan)
}

func TestParseFields(t *testing.T) {
	f, err := parseFields([]byte(`{"model":"m","prompt":[1,2],"stream":true,"max_tokens":7,"other":{"x":[1]}}`))
	if err != nil || f.Model != "m" || string(f.Prompt) != "[1,2]" || !f.Stream || f.MaxTokens == nil || *f.MaxTokens != 7 {
		t.Fatalf("%+v %v", f, err)
	}
	for _, bad := range []string{`{"model":1}`, `{"stream":"yes"}`, `{"max_tokens":1.5}`, `{"prompt":}`, `[]`} {
		if _, err := parseFields([]byte(bad)); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

// jsonString agrees with encoding/json on every input.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", `"a"b"`, `"`, `""`, "\"\x01\"", `"tab	"`, `12`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := jsonString(raw)
		var want string
		jerr := json.Unmarshal(raw, &want)
		if (err == nil) != (jerr == nil) || got != want {
			t.Fatalf("%q: %q %v, encoding/json %q %v", raw, got, err, want, jerr)
		}
	})
}
