package vllm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/vmihailenco/msgpack/v5"
)

// Worked example values from the Dynamo hashing brief (block size 4,
// tokens 0..7), computed with the reference xxHash.
const (
	local0        = 9143094415614847814
	local1        = 12124091508212882195
	loraLocal0    = 6665157333201000639  // LoRA "adapter-a"
	loraNSLocal0  = 8269515957840517240  // LoRA "adapter-a" + namespace "tenant-a"
	mm42Local0    = 18280081842874931122 // block 0 with mm_hash 42
	mm42Ident     = "000000000000002a" + "0123456789abcdef0123456789abcdef0123456789abcdef"
	eagleTokens04 = 14562210786876287112 // tokens 0..4 as one Eagle window (not used by default)
)

func newDec(t *testing.T, bs int) *Decoder {
	t.Helper()
	cfg := DefaultConfig()
	cfg.BlockSize = bs
	cfg.Worker = kvevent.WorkerRank{ID: 3, Rank: 1}
	d, err := NewDecoder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func stored(hashes []uint64, parent Hash, toks []uint32, bs int64) BlockStored {
	s := BlockStored{ParentBlockHash: parent, TokenIDs: toks, BlockSize: bs, Medium: Str("GPU")}
	for _, h := range hashes {
		s.BlockHashes = append(s.BlockHashes, UintHash(h))
	}
	return s
}

func TestDecodeWorkedHashes(t *testing.T) {
	w := kvevent.WorkerRank{ID: 3, Rank: 1}
	lora := stored([]uint64{1}, Hash{}, seq(0, 4), 4)
	lora.LoRAName = Str("adapter-a")
	salted := stored([]uint64{2}, Hash{}, seq(0, 4), 4)
	salted.LoRAName = Str("adapter-a")
	salted.ExtraKeys = []ExtraKey{{"adapter-a", "tenant-a"}}
	saltChild := stored([]uint64{3}, UintHash(2), seq(4, 4), 4)
	saltChild.LoRAName = Str("adapter-a")
	saltChild.ExtraKeys = []ExtraKey{{"adapter-a"}}
	mm := stored([]uint64{4}, Hash{}, seq(0, 4), 4)
	mm.ExtraKeys = []ExtraKey{{MMItem{Identifier: mm42Ident, Offset: 0}}}
	eagle := stored([]uint64{5}, Hash{}, []uint32{0, 1, 2, 3, 4}, 4)
	eagle.Bigrams = true
	sg := stored([]uint64{6}, Hash{}, seq(0, 4), 4)
	sg.CacheSalt = Str("tenant-a")
	sg.LoRAName = Str("adapter-a")

	b := RawBatch{Events: []RawEvent{
		stored([]uint64{10, 11}, Hash{}, seq(0, 8), 4), lora, salted, saltChild, mm, eagle, sg,
		BlockRemoved{BlockHashes: []Hash{UintHash(11)}, Medium: Str("cpu")},
		AllBlocksCleared{},
	}}
	saltedChildLocal := kvhash.LocalHash(seq(4, 4), kvhash.SaltedSeed("adapter-a", "tenant-a"))
	want := []kvevent.Event{
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 10, LocalHash: local0}, {EngineHash: 11, LocalHash: local1}}},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: loraLocal0}}, LoRAName: "adapter-a"},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 2, LocalHash: loraNSLocal0}}, LoRAName: "adapter-a"},
		{Worker: w, Kind: kvevent.Stored, HasParent: true, Parent: 2, Blocks: []kvevent.Block{{EngineHash: 3, LocalHash: saltedChildLocal}}, LoRAName: "adapter-a"},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 4, LocalHash: mm42Local0}}},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 5, LocalHash: local0}}},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 6, LocalHash: loraNSLocal0}}, LoRAName: "adapter-a"},
		{Worker: w, Tier: kvevent.TierHostPinned, Kind: kvevent.Removed, Removed: []uint64{11}},
		{Worker: w, Kind: kvevent.Cleared},
	}
	for _, f := range []Format{{Encoding: EncodingMap}, {Encoding: EncodingArray}} {
		d := newDec(t, 4)
		payload, err := Encode(b, f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := d.Decode(payload)
		if err != nil {
			t.Fatal(err)
		}
		wantF := want
		if f.Encoding == EncodingArray {
			// The array form has no cache_salt field: SGLang's salt is lost.
			wantF = append([]kvevent.Event(nil), want...)
			wantF[6] = kvevent.Event{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 6, LocalHash: loraLocal0}}, LoRAName: "adapter-a"}
		}
		if diff := cmp.Diff(wantF, res.Events); diff != "" {
			t.Errorf("%v: (-want +got)\n%s", f.Encoding, diff)
		}
		if len(res.Refused) != 0 {
			t.Errorf("%v: refused %v", f.Encoding, res.Refused)
		}
		if len(d.salts) != 0 {
			t.Errorf("salt state survives a clear: %v", d.salts)
		}
	}
	if eagleTokens04 == local0 {
		t.Fatal("worked example constants are wrong")
	}
}

func TestDecodeRefusals(t *testing.T) {
	swa := stored([]uint64{20}, Hash{}, seq(0, 4), 4)
	swa.KVCacheSpecKind, swa.GroupIdx = Str("sliding_window"), Int(1)
	grp := stored([]uint64{21}, Hash{}, seq(0, 4), 4)
	grp.GroupIdx = Int(1)
	mla := stored([]uint64{22}, Hash{}, seq(0, 4), 4)
	mla.KVCacheSpecKind, mla.GroupIdx = Str("mla_attention"), Int(0)
	b := RawBatch{Events: []RawEvent{
		stored([]uint64{1}, Hash{}, seq(0, 8), 8),         // 0 block size
		stored([]uint64{2, 3}, Hash{}, seq(0, 7), 4),      // 1 token count
		stored([]uint64{4, 5}, UintHash(5), seq(0, 8), 4), // 2 self reference
		stored([]uint64{6, 7, 6}, Hash{}, seq(0, 12), 4),  // 3 duplicate
		swa, // 4 filtered kind
		grp, // 5 filtered group
		BlockRemoved{BlockHashes: []Hash{UintHash(9)}, GroupIdx: Int(1)}, // 6 filtered removal
		UnknownEvent{Name: "BlockUpdated"},                               // 7 unknown
		MalformedEvent{Name: "BlockStored", Err: ErrMalformed},           // 8 malformed
		MalformedEvent{Name: "BlockStored", Err: ErrTooLarge},            // 9 too large
		mla,                         // accepted
		stored(nil, Hash{}, nil, 4), // empty: dropped silently
	}}
	d := newDec(t, 4)
	res := d.Convert(b)
	wantReasons := []Reason{ReasonBlockSize, ReasonTokenCount, ReasonSelfReference, ReasonDuplicateHash,
		ReasonFiltered, ReasonFiltered, ReasonFiltered, ReasonUnknownType, ReasonMalformed, ReasonTooLarge}
	var got []Reason
	for i, r := range res.Refused {
		got = append(got, r.Reason)
		if r.Index != i || r.Detail == "" {
			t.Errorf("refusal %d: %+v", i, r)
		}
	}
	if diff := cmp.Diff(wantReasons, got); diff != "" {
		t.Errorf("reasons (-want +got)\n%s", diff)
	}
	if len(res.Events) != 1 || res.Events[0].Blocks[0].EngineHash != 22 {
		t.Errorf("accepted %+v, want only the MLA store", res.Events)
	}
	if res.Refused[0].Detail != "block size 8 ≠ 4" {
		t.Errorf("detail %q", res.Refused[0].Detail)
	}
}

// TestDecodeTolerance checks the shapes older and newer engines send: a
// batch as a map, a two-element batch, extra batch elements, extra event
// positions, unknown map keys, and one malformed event among good ones.
func TestDecodeTolerance(t *testing.T) {
	enc := func(v any) []byte {
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	toks := []any{0, 1, 2, 3}
	good := []any{"BlockStored", []any{uint64(7)}, nil, toks, 4, nil, "GPU", nil, nil, 0, "full_attention", nil, "future", "fields"}
	goodMap := map[string]any{"type": "BlockStored", "block_hashes": []any{-8}, "parent_block_hash": nil,
		"token_ids": toks, "block_size": 4, "session_id": "abc", "locality": map[string]any{"x": 1}}
	bad := []any{"BlockStored", []any{uint64(9)}, nil, "not tokens", 4}
	cases := map[string][]byte{
		"array":      enc([]any{1.5, []any{good, goodMap}, 0}),
		"map batch":  enc(map[string]any{"ts": 1.5, "events": []any{good, goodMap}, "data_parallel_rank": 0, "x": 1}),
		"two elems":  enc([]any{1.5, []any{good, goodMap}}),
		"five elems": enc([]any{1.5, []any{good, goodMap}, 0, "extra", []any{1}}),
		"with bad":   enc([]any{1.5, []any{good, bad, goodMap}, 0}),
	}
	for name, payload := range cases {
		res, err := newDec(t, 4).Decode(payload)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(res.Events) != 2 || res.Events[0].Blocks[0] != (kvevent.Block{EngineHash: 7, LocalHash: local0}) ||
			res.Events[1].Blocks[0].EngineHash != uint64(1<<64-8) {
			t.Errorf("%s: events %+v", name, res.Events)
		}
		wantRefused := 0
		if name == "with bad" {
			wantRefused = 1
		}
		if len(res.Refused) != wantRefused || wantRefused == 1 && res.Refused[0].Reason != ReasonMalformed {
			t.Errorf("%s: refused %v", name, res.Refused)
		}
	}
}

func TestDecodeBadPayloads(t *testing.T) {
	deep := bytes.Repeat([]byte{0x91}, 10000)
	cases := map[string][]byte{
		"empty":         {},
		"truncated":     {0x93, 0xcb, 0x3f},
		"not array":     {0xa3, 'a', 'b', 'c'},
		"one element":   {0x91, 0x00},
		"huge array":    {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge string":   {0x93, 0x00, 0x91, 0x92, 0xdb, 0x7f, 0xff, 0xff, 0xff},
		"deep":          append([]byte{0x93, 0x00}, deep...),
		"trailing":      {0x92, 0x00, 0x90, 0x00},
		"invalid code":  {0x92, 0x00, 0x91, 0xc1},
		"events is map": {0x92, 0x00, 0x80},
	}
	for name, p := range cases {
		_, err := newDec(t, 4).Decode(p)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v, want ErrMalformed", name, err)
		}
	}
	lim := DefaultLimits()
	lim.MaxEvents = 1
	if _, err := ParseBatch([]byte{0x92, 0x00, 0x92, 0x91, 0xa1, 'x', 0x91, 0xa1, 'x'}, lim); !errors.Is(err, ErrTooLarge) {
		t.Errorf("too many events: %v", err)
	}
	lim = DefaultLimits()
	lim.MaxTokens = 4
	b, _ := Encode(RawBatch{Events: []RawEvent{stored([]uint64{1, 2}, Hash{}, seq(0, 8), 4)}}, Format{})
	p, err := ParseBatch(b, lim)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := p.Events[0].(MalformedEvent); !ok || !errors.Is(m.Err, ErrTooLarge) || m.Name != "BlockStored" {
		t.Errorf("over token limit: %#v", p.Events[0])
	}
}

func TestHashID(t *testing.T) {
	cases := []struct {
		h    Hash
		want uint64
	}{
		{UintHash(5), 5},
		{IntHash(-1), 1<<64 - 1},
		{BytesHash([]byte{0x01, 0x02}), 0x0102},
		{BytesHash(append(bytes.Repeat([]byte{0xee}, 24), 1, 2, 3, 4, 5, 6, 7, 8)), 0x0102030405060708},
		{Hash{}, 0},
	}
	for _, c := range cases {
		if got := c.h.ID(); got != c.want {
			t.Errorf("%v.ID() = %#x, want %#x", c.h, got, c.want)
		}
	}
}

// TestDecodeEmptyMMIdentifier: a multimodal item whose identifier is empty
// names no content, so it is skipped as a bare empty string is: the block
// hashes as its plain tokens (the worked example's local0), not with
// XXH3-64("") appended. A non-empty item beside it still counts.
func TestDecodeEmptyMMIdentifier(t *testing.T) {
	w := kvevent.WorkerRank{ID: 3, Rank: 1}
	bare := stored([]uint64{1}, Hash{}, seq(0, 4), 4)
	bare.ExtraKeys = []ExtraKey{{""}}
	item := stored([]uint64{2}, Hash{}, seq(0, 4), 4)
	item.ExtraKeys = []ExtraKey{{MMItem{Identifier: "", Offset: 0}}}
	mixed := stored([]uint64{3}, Hash{}, seq(0, 4), 4)
	mixed.ExtraKeys = []ExtraKey{{MMItem{Identifier: ""}, MMItem{Identifier: mm42Ident}}}
	want := []kvevent.Event{
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: local0}}},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 2, LocalHash: local0}}},
		{Worker: w, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 3, LocalHash: mm42Local0}}},
	}
	for _, f := range []Format{{Encoding: EncodingMap}, {Encoding: EncodingArray}} {
		payload, err := Encode(RawBatch{Events: []RawEvent{bare, item, mixed}}, f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := newDec(t, 4).Decode(payload)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, res.Events); diff != "" {
			t.Errorf("%v: (-want +got)\n%s", f.Encoding, diff)
		}
	}
}
