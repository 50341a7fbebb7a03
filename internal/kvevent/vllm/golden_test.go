package vllm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// sample is one line of testdata/samples.jsonl.
type sample struct {
	Variant    string `json:"variant"`
	Seq        int    `json:"seq"`
	PayloadHex string `json:"payload_hex"`
	Decoded    any    `json:"decoded"`
}

func loadSamples(t testing.TB) []sample {
	t.Helper()
	f, err := os.Open("testdata/samples.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		var s sample
		if err := d.Decode(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		t.Fatal("no samples")
	}
	return out
}

// formatOf reads the encoding and array schema from a variant name such as
// "array/group_idx/bytes", "map/spec_kind/int" or "sglang/array/signed".
func formatOf(t testing.TB, variant string) Format {
	parts := strings.Split(variant, "/")
	if parts[0] == "sglang" {
		return Format{Encoding: EncodingArray, Schema: SchemaMedium}
	}
	enc, err := ParseEncoding(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSchema(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return Format{Encoding: enc, Schema: s}
}

// The functions below build the expected RawBatch from the sample's JSON
// rendering, independently of the msgpack parser.

func jHash(t testing.TB, v any) Hash {
	switch x := v.(type) {
	case nil:
		return Hash{}
	case string:
		b, err := hex.DecodeString(strings.TrimPrefix(x, "hex:"))
		if err != nil {
			t.Fatal(err)
		}
		return BytesHash(b)
	case json.Number:
		if strings.HasPrefix(x.String(), "-") {
			i, err := strconv.ParseInt(x.String(), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return IntHash(i)
		}
		u, err := strconv.ParseUint(x.String(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return UintHash(u)
	}
	t.Fatalf("hash %T", v)
	return Hash{}
}

func jInt(t testing.TB, v any) *int64 {
	if v == nil {
		return nil
	}
	i, err := v.(json.Number).Int64()
	if err != nil {
		t.Fatal(err)
	}
	return &i
}

func jStr(v any) *string {
	if v == nil {
		return nil
	}
	s := v.(string)
	return &s
}

func jEvent(t testing.TB, v any) RawEvent {
	fields := map[string]any{}
	var tag string
	switch x := v.(type) {
	case []any:
		tag = x[0].(string)
		order := map[string][]string{"BlockStored": storedOrder, "BlockRemoved": removedOrder}[tag]
		for i, f := range x[1:] {
			fields[order[i]] = f
		}
	case map[string]any:
		tag = x["type"].(string)
		fields = x
	}
	switch tag {
	case "BlockStored":
		s := BlockStored{ParentBlockHash: jHash(t, fields["parent_block_hash"])}
		for _, h := range fields["block_hashes"].([]any) {
			s.BlockHashes = append(s.BlockHashes, jHash(t, h))
		}
		for _, tok := range fields["token_ids"].([]any) {
			n, _ := tok.(json.Number).Int64()
			s.TokenIDs = append(s.TokenIDs, uint32(n))
		}
		s.BlockSize = *jInt(t, fields["block_size"])
		s.LoRAID = jInt(t, fields["lora_id"])
		s.Medium = jStr(fields["medium"])
		s.LoRAName = jStr(fields["lora_name"])
		if ek, ok := fields["extra_keys"].([]any); ok {
			s.ExtraKeys = make([]ExtraKey, len(ek))
			for i, k := range ek {
				if k != nil {
					t.Fatalf("non-nil extra key in samples: %v", k)
				}
				s.ExtraKeys[i] = nil
			}
		}
		s.GroupIdx = jInt(t, fields["group_idx"])
		s.KVCacheSpecKind = jStr(fields["kv_cache_spec_kind"])
		s.KVCacheSpecSlidingWindow = jInt(t, fields["kv_cache_spec_sliding_window"])
		return s
	case "BlockRemoved":
		r := BlockRemoved{Medium: jStr(fields["medium"]), GroupIdx: jInt(t, fields["group_idx"])}
		for _, h := range fields["block_hashes"].([]any) {
			r.BlockHashes = append(r.BlockHashes, jHash(t, h))
		}
		return r
	case "AllBlocksCleared":
		return AllBlocksCleared{}
	}
	t.Fatalf("event tag %q", tag)
	return nil
}

func jBatch(t testing.TB, v any) RawBatch {
	a := v.([]any)
	ts, err := a[0].(json.Number).Float64()
	if err != nil {
		t.Fatal(err)
	}
	b := RawBatch{TS: ts}
	for _, e := range a[1].([]any) {
		b.Events = append(b.Events, jEvent(t, e))
	}
	if len(a) > 2 {
		b.DPRank = jInt(t, a[2])
	}
	return b
}

// TestGoldenParse checks every sample payload parses to the batch its JSON
// rendering describes.
func TestGoldenParse(t *testing.T) {
	for _, s := range loadSamples(t) {
		payload, err := hex.DecodeString(s.PayloadHex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseBatch(payload, DefaultLimits())
		if err != nil {
			t.Fatalf("%s seq %d: %v", s.Variant, s.Seq, err)
		}
		want := jBatch(t, s.Decoded)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s seq %d: parse mismatch (-want +got):\n%s", s.Variant, s.Seq, diff)
		}
	}
}

// TestGoldenEncode checks the encoder reproduces every sample payload byte
// for byte from the batch its JSON rendering describes, in the sample's own
// encoding and field set.
func TestGoldenEncode(t *testing.T) {
	for _, s := range loadSamples(t) {
		want, _ := hex.DecodeString(s.PayloadHex)
		got, err := Encode(jBatch(t, s.Decoded), formatOf(t, s.Variant))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s seq %d: encoded\n%x\nwant\n%x", s.Variant, s.Seq, got, want)
		}
	}
}

// TestGoldenDecode checks every vLLM era decodes the shared scenario
// (three chained stores of tokens 1000..1063, then a removal) into the same
// domain events: engine ids equal across int and bytes hashes (the last 8
// digest bytes) and local hashes recomputed from the tokens.
func TestGoldenDecode(t *testing.T) {
	w := kvevent.WorkerRank{ID: 7, Rank: 0}
	local := func(first uint32) uint64 {
		toks := make([]uint32, 16)
		for i := range toks {
			toks[i] = first + uint32(i)
		}
		return kvhash.LocalHash(toks, kvhash.Seed)
	}
	const h0, h1, h2, h3 = 17507053300047258101, 14424512966625972522, 6803416000392209307, 12947251339927443894
	want := [][]kvevent.Event{
		{{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h0, LocalHash: local(1000)}, {EngineHash: h1, LocalHash: local(1016)}}}},
		{{Worker: w, Kind: kvevent.Stored, HasParent: true, Parent: h1, Blocks: []kvevent.Block{{EngineHash: h2, LocalHash: local(1032)}}}},
		{{Worker: w, Kind: kvevent.Stored, HasParent: true, Parent: h2, Blocks: []kvevent.Block{{EngineHash: h3, LocalHash: local(1048)}}}},
		{{Worker: w, Kind: kvevent.Removed, Removed: []uint64{h3}}},
	}
	decoders := map[string]*Decoder{}
	n := 0
	for _, s := range loadSamples(t) {
		if strings.HasPrefix(s.Variant, "sglang") {
			continue
		}
		d := decoders[s.Variant]
		if d == nil {
			cfg := DefaultConfig()
			cfg.Worker = w
			var err error
			if d, err = NewDecoder(cfg); err != nil {
				t.Fatal(err)
			}
			decoders[s.Variant] = d
		}
		payload, _ := hex.DecodeString(s.PayloadHex)
		res, err := d.Decode(payload)
		if err != nil {
			t.Fatalf("%s seq %d: %v", s.Variant, s.Seq, err)
		}
		if len(res.Refused) != 0 {
			t.Errorf("%s seq %d: refused %v", s.Variant, s.Seq, res.Refused)
		}
		if diff := cmp.Diff(want[s.Seq], res.Events); diff != "" {
			t.Errorf("%s seq %d: (-want +got)\n%s", s.Variant, s.Seq, diff)
		}
		n++
	}
	if len(decoders) < 8 || n < 32 {
		t.Errorf("only %d variants, %d payloads checked", len(decoders), n)
	}
}

// TestGoldenSGLang checks the SGLang sample: signed hashes become their
// two's-complement bit pattern, a nil medium is the device tier.
func TestGoldenSGLang(t *testing.T) {
	var s sample
	for _, x := range loadSamples(t) {
		if strings.HasPrefix(x.Variant, "sglang") {
			s = x
		}
	}
	payload, _ := hex.DecodeString(s.PayloadHex)
	cfg := DefaultConfig()
	d, _ := NewDecoder(cfg)
	res, err := d.Decode(payload)
	if err != nil || len(res.Refused) != 0 {
		t.Fatalf("decode: %v %v", err, res.Refused)
	}
	neg := int64(-5402312323117846107)
	toks := func(first uint32) uint64 {
		b := make([]uint32, 16)
		for i := range b {
			b[i] = first + uint32(i)
		}
		return kvhash.LocalHash(b, kvhash.Seed)
	}
	want := []kvevent.Event{
		{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: uint64(neg), LocalHash: toks(2000)}}},
		{Kind: kvevent.Stored, HasParent: true, Parent: uint64(neg), Blocks: []kvevent.Block{{EngineHash: 8273459812734512345, LocalHash: toks(2016)}}},
		{Kind: kvevent.Removed, Removed: []uint64{8273459812734512345}},
	}
	if diff := cmp.Diff(want, res.Events); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if res.DPRank == nil || *res.DPRank != 0 || res.TS != 1796000001.25 {
		t.Errorf("batch header: ts %v rank %v", res.TS, res.DPRank)
	}
}
