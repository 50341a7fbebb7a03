package dynamo

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// The golden messages below are written byte by byte from the msgpack spec
// and the serde rules rmp_serde::to_vec_named follows (structs as maps with
// field-name keys in declaration order, Option::None as nil, a newtype
// variant as a one-entry map {variant: value}, a unit variant as its name
// string, integers in their most compact form). They do not come from our
// encoder. The stored block is the worked example of the reference (block
// size 4, tokens 0..3): tokens_hash = local[0] = 0x7ee2cbedc694ab46.
const goldenStored = "\x83" +
	"\xa9worker_id" + "\x07" +
	"\xacstorage_tier" + "\xa6device" +
	"\xa5event" + "\x83" +
	"\xa8event_id" + "\x01" +
	"\xa4data" + "\x81" + "\xa6stored" + "\x83" +
	"\xabparent_hash" + "\xc0" +
	"\xaestart_position" + "\xc0" +
	"\xa6blocks" + "\x91" + "\x83" +
	"\xaablock_hash" + "\x2a" +
	"\xabtokens_hash" + "\xcf\x7e\xe2\xcb\xed\xc6\x94\xab\x46" +
	"\xadmm_extra_info" + "\xc0" +
	"\xa7dp_rank" + "\x00"

// A removal on dp rank 2 of worker 300, on host memory, hashes 42 and 2^63.
const goldenRemoved = "\x83" +
	"\xa9worker_id" + "\xcd\x01\x2c" +
	"\xacstorage_tier" + "\xabhost_pinned" +
	"\xa5event" + "\x83" +
	"\xa8event_id" + "\xcc\xc8" +
	"\xa4data" + "\x81" + "\xa7removed" + "\x81" +
	"\xacblock_hashes" + "\x92" + "\x2a" + "\xcf\x80\x00\x00\x00\x00\x00\x00\x00" +
	"\xa7dp_rank" + "\x02"

// A clear: the unit variant is the bare string "cleared".
const goldenCleared = "\x83" +
	"\xa9worker_id" + "\x07" +
	"\xacstorage_tier" + "\xa6device" +
	"\xa5event" + "\x83" +
	"\xa8event_id" + "\x03" +
	"\xa4data" + "\xa7cleared" +
	"\xa7dp_rank" + "\x00"

func goldenEvents() map[string]kvevent.Event {
	return map[string]kvevent.Event{
		goldenStored: {
			Worker: kvevent.WorkerRank{ID: 7}, ID: 1, Kind: kvevent.Stored,
			Blocks: []kvevent.Block{{EngineHash: 42, LocalHash: 0x7ee2cbedc694ab46}},
		},
		goldenRemoved: {
			Worker: kvevent.WorkerRank{ID: 300, Rank: 2}, Tier: kvevent.TierHostPinned, ID: 200,
			Kind: kvevent.Removed, Removed: []uint64{42, 1 << 63},
		},
		goldenCleared: {Worker: kvevent.WorkerRank{ID: 7}, ID: 3, Kind: kvevent.Cleared},
	}
}

func TestGoldenLocalHashIsTheWorkedExample(t *testing.T) {
	got := kvhash.LocalHash([]uint32{0, 1, 2, 3}, kvhash.Seed)
	if got != 0x7ee2cbedc694ab46 {
		t.Fatalf("local[0] = %#x, want 0x7ee2cbedc694ab46", got)
	}
}

func TestGoldenEncode(t *testing.T) {
	for golden, ev := range goldenEvents() {
		got, err := EncodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(golden)) {
			t.Errorf("EncodeEvent(%+v)\n got %s\nwant %s", ev, hex.EncodeToString(got), hex.EncodeToString([]byte(golden)))
		}
	}
}

func TestGoldenDecode(t *testing.T) {
	for golden, want := range goldenEvents() {
		got, err := DecodeEvent([]byte(golden))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("DecodeEvent mismatch (-want +got):\n%s", diff)
		}
		got2, env, err := Decode([]byte(golden))
		if err != nil || env != nil {
			t.Fatalf("Decode bare: env=%v err=%v", env, err)
		}
		if diff := cmp.Diff(want, got2, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Decode mismatch (-want +got):\n%s", diff)
		}
	}
}

// goldenEnvelope wraps goldenCleared as Dynamo's event plane does.
const goldenEnvelope = "\x86" +
	"\xa5topic" + "\xa9kv-events" +
	"\xacpublisher_id" + "\xcd\x30\x39" +
	"\xa8sequence" + "\x2a" +
	"\xacpublished_at" + "\xcf\x00\x00\x01\x8b\xcf\xe5\x68\x00" +
	"\xafpublished_at_ns" + "\x00" +
	"\xa7payload" + "\xc4\x47" + goldenCleared

func TestGoldenEnvelope(t *testing.T) {
	if len(goldenCleared) != 0x47 {
		t.Fatalf("goldenCleared is %d bytes; fix the bin header", len(goldenCleared))
	}
	want := Envelope{Topic: "kv-events", PublisherID: 12345, Sequence: 42, PublishedAtMs: 1700000000000, Payload: []byte(goldenCleared)}
	if got := EncodeEnvelope(want); !bytes.Equal(got, []byte(goldenEnvelope)) {
		t.Errorf("EncodeEnvelope\n got %x\nwant %x", got, goldenEnvelope)
	}
	ev, env, err := Decode([]byte(goldenEnvelope))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&want, env); diff != "" {
		t.Errorf("envelope (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(goldenEvents()[goldenCleared], ev, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
}

func TestGoldenJSON(t *testing.T) {
	// What serde_json writes for the golden stored event.
	const want = `{"worker_id":7,"storage_tier":"device","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"start_position":null,"blocks":[{"block_hash":42,"tokens_hash":9143094415614847814,"mm_extra_info":null}]}},"dp_rank":0}}`
	ev := goldenEvents()[goldenStored]
	got, err := EncodeEventJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("EncodeEventJSON\n got %s\nwant %s", got, want)
	}
	back, err := DecodeEventJSON([]byte(want))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ev, back, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// Liberal decoding: shapes a foreign publisher may produce.
func TestDecodeLenient(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want kvevent.Event
	}{
		{
			name: "cleared as a map, fields reordered, tier and dp_rank absent, unknown fields",
			in: "\x84" + "\xa5extra" + "\x92\x01\xa1x" +
				"\xa5event" + "\x83" + "\xa4data" + "\x81\xa7cleared\xc0" + "\xa8event_id" + "\x05" + "\xa3new" + "\x80" +
				"\xa9worker_id" + "\x09" +
				"\xa9residency" + "\xc0",
			want: kvevent.Event{Worker: kvevent.WorkerRank{ID: 9}, ID: 5, Kind: kvevent.Cleared},
		},
		{
			name: "cleared as a map to an empty array, tier nil",
			in: "\x83" + "\xa9worker_id" + "\x01" + "\xacstorage_tier" + "\xc0" +
				"\xa5event" + "\x82" + "\xa8event_id" + "\x00" + "\xa4data" + "\x81\xa7cleared\x90",
			want: kvevent.Event{Worker: kvevent.WorkerRank{ID: 1}, Kind: kvevent.Cleared},
		},
		{
			name: "signed hashes reinterpreted, parent present, positional block, start_position set",
			in: "\x82" + "\xa9worker_id" + "\x01" +
				"\xa5event" + "\x83" + "\xa8event_id" + "\x02" + "\xa7dp_rank" + "\x03" +
				"\xa4data" + "\x81\xa6stored" + "\x83" +
				"\xaestart_position" + "\x10" +
				"\xabparent_hash" + "\xff" +
				"\xa6blocks" + "\x92" +
				"\x83" + "\xabtokens_hash" + "\xd3\xff\xff\xff\xff\xff\xff\xff\xfe" + "\xaablock_hash" + "\xd0\x80" + "\xadmm_extra_info" + "\x81\xaamm_objects\x90" +
				"\x93" + "\x05" + "\x06" + "\xc0",
			want: kvevent.Event{
				Worker: kvevent.WorkerRank{ID: 1, Rank: 3}, ID: 2, Kind: kvevent.Stored,
				HasParent: true, Parent: ^uint64(0),
				Blocks: []kvevent.Block{{EngineHash: uint64(1<<64 - 128), LocalHash: ^uint64(1)}, {EngineHash: 5, LocalHash: 6}},
			},
		},
		{
			name: "payload as str inside an envelope with an unknown field",
			in: "\x83" + "\xa8sequence" + "\x01" + "\xa4what" + "\xc3" +
				"\xa7payload" + "\xd9\x47" + goldenCleared,
			want: kvevent.Event{Worker: kvevent.WorkerRank{ID: 7}, ID: 3, Kind: kvevent.Cleared},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := Decode([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeJSONLenient(t *testing.T) {
	in := `{"event":{"data":{"cleared":null},"event_id":4,"unknown":[1,2]},"worker_id":11,"session_id":"s"}`
	got, err := DecodeEventJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := kvevent.Event{Worker: kvevent.WorkerRank{ID: 11}, ID: 4, Kind: kvevent.Cleared}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	in = `{"worker_id":1,"event":{"event_id":1,"data":{"removed":{"block_hashes":[-1,18446744073709551615]}}}}`
	got, err = DecodeEventJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]uint64{^uint64(0), ^uint64(0)}, got.Removed); diff != "" {
		t.Errorf("removed (-want +got):\n%s", diff)
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := map[string]string{
		"empty":              "",
		"not a map":          "\x93\x01\x02\x03",
		"missing worker":     "\x81\xa5event\x82\xa8event_id\x00\xa4data\xa7cleared",
		"missing event":      "\x81\xa9worker_id\x01",
		"negative worker":    "\x82\xa9worker_id\xff\xa5event\x82\xa8event_id\x00\xa4data\xa7cleared",
		"unknown tier":       "\x83\xa9worker_id\x01\xacstorage_tier\xa3gpu\xa5event\x82\xa8event_id\x00\xa4data\xa7cleared",
		"unknown variant":    "\x82\xa9worker_id\x01\xa5event\x82\xa8event_id\x00\xa4data\xa5moved",
		"two variants":       "\x82\xa9worker_id\x01\xa5event\x82\xa8event_id\x00\xa4data\x82\xa7cleared\xc0\xa7cleared\xc0",
		"dp rank too big":    "\x82\xa9worker_id\x01\xa5event\x83\xa8event_id\x00\xa7dp_rank\xcf\x00\x00\x00\x01\x00\x00\x00\x00\xa4data\xa7cleared",
		"block without hash": "\x82\xa9worker_id\x01\xa5event\x82\xa8event_id\x00\xa4data\x81\xa6stored\x81\xa6blocks\x91\x81\xaablock_hash\x01",
		"stored sans blocks": "\x82\xa9worker_id\x01\xa5event\x82\xa8event_id\x00\xa4data\x81\xa6stored\x81\xabparent_hash\xc0",
		"huge array header":  "\x82\xa9worker_id\x01\xa5event\x82\xa8event_id\x00\xa4data\x81\xa7removed\x81\xacblock_hashes\xdd\xff\xff\xff\xff",
		"huge str header":    "\x81\xdb\xff\xff\xff\xff",
		"trailing bytes":     goldenCleared + "\x00",
		"truncated":          goldenStored[:len(goldenStored)-3],
		"deep nesting":       "\x82\xa9worker_id\x01\xa3bad" + strings.Repeat("\x91", 100) + "\x00",
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := Decode([]byte(in))
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestTooManyBlocks(t *testing.T) {
	ev := kvevent.Event{Kind: kvevent.Removed, Removed: make([]uint64, MaxBlocksPerEvent+1)}
	b, err := EncodeEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeEvent(b); !errors.Is(err, ErrTooManyBlocks) {
		t.Fatalf("msgpack: err = %v, want ErrTooManyBlocks", err)
	}
	j, err := EncodeEventJSON(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeEventJSON(j); !errors.Is(err, ErrTooManyBlocks) {
		t.Fatalf("json: err = %v, want ErrTooManyBlocks", err)
	}
	ev.Removed = ev.Removed[:MaxBlocksPerEvent]
	b, _ = EncodeEvent(ev)
	if _, err := DecodeEvent(b); err != nil {
		t.Fatalf("exactly the cap: %v", err)
	}
}

func TestEncodeRejectsUnknown(t *testing.T) {
	if _, err := EncodeEvent(kvevent.Event{}); err == nil {
		t.Error("kind 0 encoded")
	}
	if _, err := EncodeEvent(kvevent.Event{Kind: kvevent.Cleared, Tier: 9}); err == nil {
		t.Error("tier 9 encoded")
	}
	if _, err := EncodeEventJSON(kvevent.Event{Kind: 7}); err == nil {
		t.Error("kind 7 encoded as json")
	}
}

func TestSubject(t *testing.T) {
	if got := Subject("dynamo", "backend"); got != "namespace.dynamo.component.backend.kv-events" {
		t.Errorf("Subject = %q", got)
	}
	if got := StreamName("my_ns", "backend"); got != "namespace-my-ns-component-backend-kv-events" {
		t.Errorf("StreamName = %q", got)
	}
}

func genEvent() *rapid.Generator[kvevent.Event] {
	return rapid.Custom(func(t *rapid.T) kvevent.Event {
		ev := kvevent.Event{
			Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(rapid.Uint64().Draw(t, "worker")), Rank: kvevent.DPRank(rapid.Uint32().Draw(t, "rank"))},
			Tier:   kvevent.Tier(rapid.IntRange(0, kvevent.NumTiers-1).Draw(t, "tier")),
			ID:     rapid.Uint64().Draw(t, "id"),
			Kind:   kvevent.Kind(rapid.IntRange(int(kvevent.Stored), int(kvevent.Cleared)).Draw(t, "kind")),
		}
		switch ev.Kind {
		case kvevent.Stored:
			ev.HasParent = rapid.Bool().Draw(t, "hasParent")
			if ev.HasParent {
				ev.Parent = rapid.Uint64().Draw(t, "parent")
			}
			n := rapid.IntRange(0, 40).Draw(t, "blocks")
			for range n {
				ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: rapid.Uint64().Draw(t, "e"), LocalHash: rapid.Uint64().Draw(t, "l")})
			}
		case kvevent.Removed:
			ev.Removed = rapid.SliceOfN(rapid.Uint64(), 0, 40).Draw(t, "removed")
		}
		return ev
	})
}

func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := genEvent().Draw(t, "ev")
		b, err := EncodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("msgpack (-want +got):\n%s", diff)
		}
		env := Envelope{
			Topic: rapid.String().Draw(t, "topic"), PublisherID: rapid.Uint64().Draw(t, "pub"),
			Sequence: rapid.Uint64().Draw(t, "seq"), PublishedAtMs: rapid.Uint64().Draw(t, "ms"), PublishedAtNs: rapid.Uint64().Draw(t, "ns"),
		}
		wb, err := EncodeEventInEnvelope(env, ev)
		if err != nil {
			t.Fatal(err)
		}
		got, genv, err := Decode(wb)
		if err != nil {
			t.Fatal(err)
		}
		env.Payload = b
		if diff := cmp.Diff(&env, genv); diff != "" {
			t.Fatalf("envelope (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(ev, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("enveloped (-want +got):\n%s", diff)
		}
		j, err := EncodeEventJSON(ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err = DecodeEventJSON(j)
		if err != nil {
			t.Fatalf("%v in %s", err, j)
		}
		if diff := cmp.Diff(ev, got, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("json (-want +got):\n%s", diff)
		}
	})
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{goldenStored, goldenRemoved, goldenCleared, goldenEnvelope} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, _, err := Decode(b)
		if err != nil {
			return
		}
		if len(ev.Blocks) > MaxBlocksPerEvent || len(ev.Removed) > MaxBlocksPerEvent {
			t.Fatalf("cap not enforced")
		}
		// Whatever decodes must re-encode and decode to the same event.
		enc, err := EncodeEvent(ev)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		back, err := DecodeEvent(enc)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("(-first +second):\n%s", diff)
		}
	})
}

func FuzzDecodeEventJSON(f *testing.F) {
	for _, ev := range goldenEvents() {
		j, _ := EncodeEventJSON(ev)
		f.Add(j)
	}
	f.Add([]byte(`{"worker_id":1,"event":{"event_id":1,"data":{"cleared":[]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeEventJSON(b)
		if err != nil {
			return
		}
		j, err := EncodeEventJSON(ev)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		back, err := DecodeEventJSON(j)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, back, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("(-first +second):\n%s", diff)
		}
	})
}

func BenchmarkDecodeStored64(b *testing.B) {
	ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: 1 << 40}, ID: 1234, Kind: kvevent.Stored, HasParent: true, Parent: 1 << 62}
	for i := range 64 {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: uint64(i) * 0x9e3779b97f4a7c15, LocalHash: uint64(i) * 0xc2b2ae3d27d4eb4f})
	}
	msg, _ := EncodeEventInEnvelope(Envelope{Topic: KVEventTopic, PublisherID: 1, Sequence: 1}, ev)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(msg); err != nil {
			b.Fatal(err)
		}
	}
}
