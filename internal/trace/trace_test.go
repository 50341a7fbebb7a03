package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedTraces(t *testing.T) {
	for name, rows := range map[string]int{"conversation": 12031, "synthetic": 3993} {
		reqs, err := Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(reqs) != rows {
			t.Fatalf("%s: %d rows, want %d", name, len(reqs), rows)
		}
		if !slices.IsSortedFunc(reqs, func(a, b Request) int { return int(a.Timestamp - b.Timestamp) }) {
			t.Fatalf("%s not sorted by time", name)
		}
	}
}

func TestParsePlainAndGzip(t *testing.T) {
	src := `{"timestamp": 5, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}

{"timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [7]}
`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(src))
	zw.Close()
	for _, in := range [][]byte{[]byte(src), gz.Bytes()} {
		reqs, err := Parse(bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(reqs) != 2 || reqs[0].Timestamp != 2 || reqs[1].InputLength != 1000 || !slices.Equal(reqs[1].HashIDs, []uint64{1, 2}) {
			t.Fatalf("got %+v", reqs)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, bad := range []string{
		`{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": []}`,
		`{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}`,
		`{"timestamp": 0, "input_length": "x"}`,
		`not json`,
	} {
		_, err := Parse(strings.NewReader("\n" + bad + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

func TestTokens(t *testing.T) {
	a := Request{InputLength: 700, HashIDs: []uint64{1, 2}}
	b := Request{InputLength: 1024, HashIDs: []uint64{1, 3}}
	ta, tb := a.Tokens(nil, 1), b.Tokens(nil, 2)
	if len(ta) != 700 || len(tb) != 1024 {
		t.Fatalf("lengths %d %d", len(ta), len(tb))
	}
	if !slices.Equal(ta[:512], tb[:512]) {
		t.Fatal("same hash id, different tokens")
	}
	if slices.Equal(ta[512:700], tb[512:700]) {
		t.Fatal("different hash ids, same tokens")
	}
	// Fewer ids than blocks: the tail is unique per salt.
	c := Request{InputLength: 600, HashIDs: []uint64{1}}
	tc1, tc2 := c.Tokens(nil, 10), c.Tokens(nil, 11)
	if !slices.Equal(tc1[:512], ta[:512]) || slices.Equal(tc1[512:], tc2[512:]) {
		t.Fatal("tail fill not unique per salt")
	}
	for _, tok := range ta {
		if tok >= VocabSize {
			t.Fatalf("token %d out of vocabulary", tok)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [7]}`))
	f.Add([]byte("\x1f\x8b garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		reqs, err := Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, q := range reqs {
			if q.InputLength < 0 || len(q.HashIDs) > (q.InputLength+511)/512 {
				t.Fatalf("invalid row accepted: %+v", q)
			}
			if q.InputLength < 1<<16 {
				_ = q.Tokens(nil, 0)
			}
		}
	})
}
