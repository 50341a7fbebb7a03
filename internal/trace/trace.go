package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// BlockTokens is the number of tokens one Mooncake hash id stands for.
const BlockTokens = 512

// MaxLineBytes bounds one JSON line; longer lines are refused.
const MaxLineBytes = 16 << 20

// Request is one row of a Mooncake trace.
type Request struct {
	// Timestamp is the arrival time in milliseconds from the trace start.
	Timestamp int64 `json:"timestamp"`
	// InputLength is the prompt length in tokens.
	InputLength int `json:"input_length"`
	// OutputLength is the number of tokens generated.
	OutputLength int `json:"output_length"`
	// HashIDs names the prompt's 512-token blocks in order.
	HashIDs []uint64 `json:"hash_ids"`
}

// ErrInvalid wraps every validation failure of a trace row.
var ErrInvalid = errors.New("invalid trace row")

//go:embed data/*.jsonl.gz
var embedded embed.FS

// Embedded names the traces built into the binary.
var Embedded = []string{"conversation", "synthetic"}

// Load reads a trace by embedded name ("conversation", "synthetic") or, for
// anything else, from a file path (plain JSON lines or gzipped).
func Load(nameOrPath string) ([]Request, error) {
	for _, n := range Embedded {
		if n == nameOrPath {
			f, err := embedded.Open("data/" + n + "_trace.jsonl.gz")
			if err != nil {
				return nil, fmt.Errorf("opening embedded trace %s: %w", n, err)
			}
			defer f.Close()
			return Parse(f)
		}
	}
	f, err := os.Open(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("opening trace: %w", err)
	}
	defer f.Close()
	reqs, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", nameOrPath, err)
	}
	return reqs, nil
}

// Parse reads a Mooncake trace, gzipped or plain, and validates every row:
// non-negative timestamp and lengths, and no more hash ids than the prompt
// has blocks (ceil(input_length / 512)). Blank lines are skipped. Rows are
// returned sorted by timestamp (stable, so equal times keep file order).
func Parse(r io.Reader) ([]Request, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("opening gzip: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 64<<10)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var out []Request
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var q Request
		if err := json.Unmarshal(b, &q); err != nil {
			return nil, fmt.Errorf("line %d: %w: %v", line, ErrInvalid, err)
		}
		if err := q.validate(); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading line %d: %w", line+1, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Timestamp < out[j].Timestamp })
	return out, nil
}

func (q Request) validate() error {
	switch {
	case q.Timestamp < 0:
		return fmt.Errorf("%w: negative timestamp %d", ErrInvalid, q.Timestamp)
	case q.InputLength < 0:
		return fmt.Errorf("%w: negative input_length %d", ErrInvalid, q.InputLength)
	case q.OutputLength < 0:
		return fmt.Errorf("%w: negative output_length %d", ErrInvalid, q.OutputLength)
	case len(q.HashIDs) > (q.InputLength+BlockTokens-1)/BlockTokens:
		return fmt.Errorf("%w: %d hash_ids for input_length %d (at most %d)", ErrInvalid,
			len(q.HashIDs), q.InputLength, (q.InputLength+BlockTokens-1)/BlockTokens)
	}
	return nil
}

// Tokens expands the request's prompt into deterministic token ids, appended
// to dst[:0]: hash id h gives the 512 tokens BlockToken(h, 0..511); the last
// block is shortened to match input_length, and tokens past the hash ids
// (when the trace lists fewer ids than blocks) are filled from a per-request
// unique stream seeded by salt, so they never match another request's.
func (q Request) Tokens(dst []uint32, salt uint64) []uint32 {
	dst = dst[:0]
	for _, h := range q.HashIDs {
		for j := 0; j < BlockTokens && len(dst) < q.InputLength; j++ {
			dst = append(dst, BlockToken(h, j))
		}
	}
	for j := 0; len(dst) < q.InputLength; j++ {
		dst = append(dst, BlockToken(^salt, j))
	}
	return dst
}

// VocabSize bounds the token ids Tokens produces (a Qwen-sized vocabulary).
const VocabSize = 151_643

// BlockToken is token j of hash id h: a splitmix64 mix of (h, j) reduced to
// the vocabulary. Different ids give different blocks with overwhelming
// probability (a block is 512 such tokens).
func BlockToken(h uint64, j int) uint32 {
	x := h*0x9e3779b97f4a7c15 + uint64(j) + 1
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x % VocabSize)
}
