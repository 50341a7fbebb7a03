package replica

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

func genEvent() *rapid.Generator[router.LifecycleEvent] {
	return rapid.Custom(func(t *rapid.T) router.LifecycleEvent {
		ev := router.LifecycleEvent{
			Kind:      router.LifecycleKind(rapid.IntRange(1, 3).Draw(t, "kind")),
			RouterID:  rapid.Uint64().Draw(t, "router"),
			RequestID: rapid.StringN(1, 40, -1).Draw(t, "id"),
			Worker:    kvevent.WorkerRank{ID: kvevent.WorkerID(rapid.Uint64().Draw(t, "w")), Rank: kvevent.DPRank(rapid.IntRange(0, 1<<16).Draw(t, "rank"))},
			Model:     rapid.SampledFrom([]string{"", "", "m", "org/model-b"}).Draw(t, "model"),
		}
		if ev.Kind == router.AddRequest {
			ev.BlockHashes = rapid.SliceOfN(rapid.Uint64(), 0, 50).Draw(t, "hashes")
			if len(ev.BlockHashes) == 0 {
				ev.BlockHashes = nil
			}
			ev.PrefillTokens = rapid.IntRange(0, 1<<20).Draw(t, "prefill")
			ev.ExpectedOutputTokens = rapid.IntRange(0, 1<<16).Draw(t, "out")
			ev.Private = rapid.Bool().Draw(t, "private")
		}
		return ev
	})
}

// genStamped draws a sequenced event or (one time in three) an
// unsequenced one.
func genStamped() *rapid.Generator[Event] {
	return rapid.Custom(func(t *rapid.T) Event {
		ev := Event{LifecycleEvent: genEvent().Draw(t, "ev")}
		if rapid.IntRange(0, 2).Draw(t, "sequenced") > 0 {
			ev.Epoch = rapid.Uint64().Draw(t, "epoch")
			ev.Seq = rapid.Uint64Range(1, 1<<63).Draw(t, "seq")
		}
		return ev
	})
}

func TestEventRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ev := genStamped().Draw(t, "ev")
		b, err := AppendEvent(nil, ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

func TestChunkRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := Chunk{RouterID: rapid.Uint64().Draw(t, "r"), Last: rapid.Bool().Draw(t, "last"),
			Epoch: rapid.Uint64().Draw(t, "epoch"), Seq: rapid.Uint64().Draw(t, "seq"),
			Events: rapid.SliceOfN(genEvent(), 0, 5).Draw(t, "evs")}
		if len(c.Events) == 0 {
			c.Events = nil
		}
		b, err := AppendChunk(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeChunk(b)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c, got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}

// TestDecodeEventVariants decodes hand-built payloads: the Dynamo-style
// map form of unit variants, signed hashes, missing optional fields and
// unknown fields, and refuses what lacks required fields.
func TestDecodeEventVariants(t *testing.T) {
	enc := func(v any) []byte {
		var buf bytes.Buffer
		e := msgpack.NewEncoder(&buf)
		e.SetSortMapKeys(true)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := []struct {
		name string
		in   any
		want Event
		err  bool
	}{
		{"free as map", map[string]any{"request_id": "a", "router_id": 5, "data": map[string]any{"Free": nil}},
			Event{LifecycleEvent: router.LifecycleEvent{Kind: router.Free, RouterID: 5, RequestID: "a"}}, false},
		{"add, signed hash, extras", map[string]any{"request_id": "b", "router_id": 6, "lora_name": "x",
			"worker": map[string]any{"worker_id": 3, "dp_rank": 1, "extra": []any{1, 2}},
			"data":   map[string]any{"AddRequest": map[string]any{"token_sequence": []any{int64(-1), uint64(7)}, "isl": 99}}},
			Event{LifecycleEvent: router.LifecycleEvent{Kind: router.AddRequest, RouterID: 6, RequestID: "b", Worker: kvevent.WorkerRank{ID: 3, Rank: 1}, BlockHashes: []uint64{^uint64(0), 7}}}, false},
		{"mark", map[string]any{"request_id": "c", "router_id": 1, "data": "MarkPrefillCompleted"},
			Event{LifecycleEvent: router.LifecycleEvent{Kind: router.MarkPrefillCompleted, RouterID: 1, RequestID: "c"}}, false},
		{"no router id", map[string]any{"request_id": "c", "data": "Free"}, Event{}, true},
		{"no data", map[string]any{"request_id": "c", "router_id": 1}, Event{}, true},
		{"unknown variant", map[string]any{"request_id": "c", "router_id": 1, "data": "Explode"}, Event{}, true},
		{"negative prefill", map[string]any{"request_id": "c", "router_id": 1, "data": map[string]any{"AddRequest": map[string]any{"prefill_tokens": -3}}}, Event{}, true},
		{"not a map", []any{1, 2, 3}, Event{}, true},
		{"sequenced", map[string]any{"request_id": "d", "router_id": 2, "epoch": 9, "seq": 4, "data": "Free"},
			Event{LifecycleEvent: router.LifecycleEvent{Kind: router.Free, RouterID: 2, RequestID: "d"}, Epoch: 9, Seq: 4}, false},
		{"epoch without seq means nothing", map[string]any{"request_id": "d", "router_id": 2, "epoch": 9, "data": "Free"},
			Event{LifecycleEvent: router.LifecycleEvent{Kind: router.Free, RouterID: 2, RequestID: "d"}}, false},
		{"negative seq", map[string]any{"request_id": "d", "router_id": 2, "seq": -1, "data": "Free"}, Event{}, true},
	}
	for _, c := range cases {
		got, err := DecodeEvent(enc(c.in))
		if c.err {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%s: err %v, want ErrMalformed", c.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
	// Deep nesting in an unknown field is refused, not recursed into.
	deep := append([]byte{0x83, 0xaa}, "request_id"...)
	deep = append(deep, 0xa1, 'x', 0xa1, 'z')
	for range 100000 {
		deep = append(deep, 0x91)
	}
	if _, err := DecodeEvent(deep); !errors.Is(err, ErrMalformed) {
		t.Errorf("deep nesting: %v", err)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, ev := range []router.LifecycleEvent{
		{Kind: router.AddRequest, RouterID: 1, RequestID: "a", Worker: kvevent.WorkerRank{ID: 2, Rank: 1}, BlockHashes: []uint64{1, 2, 3}, PrefillTokens: 40, ExpectedOutputTokens: 9},
		{Kind: router.Free, RouterID: 1, RequestID: "a"},
		{Kind: router.MarkPrefillCompleted, RouterID: 3, RequestID: "b"},
		{Kind: router.AddRequest, RouterID: 5, RequestID: "c", Model: "org/model-b", Worker: kvevent.WorkerRank{ID: 7}, BlockHashes: []uint64{9}, PrefillTokens: 32},
		{Kind: router.Free, RouterID: 5, RequestID: "c", Model: "org/model-b"},
	} {
		b, _ := AppendEvent(nil, Event{LifecycleEvent: ev})
		f.Add(b)
		b, _ = AppendEvent(nil, Event{LifecycleEvent: ev, Epoch: 1 << 60, Seq: 77})
		f.Add(b)
		c, _ := AppendChunk(nil, Chunk{RouterID: 4, Epoch: 5, Seq: 6, Last: true, Events: []router.LifecycleEvent{ev}})
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if ev, err := DecodeEvent(b); err == nil {
			// Whatever decodes re-encodes and decodes to the same event.
			b2, err := AppendEvent(nil, ev)
			if err != nil {
				t.Fatal(err)
			}
			ev2, err := DecodeEvent(b2)
			if err != nil || !cmp.Equal(ev, ev2) {
				t.Fatalf("re-decode: %v %v", err, cmp.Diff(ev, ev2))
			}
		}
		_, _ = DecodeChunk(b)
	})
}

// TestEventModel: the model field round-trips, is absent from the
// default pool's events (whose bytes stay those of a single-model
// router's, so older replicas read them), and is bounded.
func TestEventModel(t *testing.T) {
	ev := Event{LifecycleEvent: router.LifecycleEvent{Kind: router.Free, RouterID: 1, RequestID: "a", Model: "m"}, Epoch: 2, Seq: 3}
	b, err := AppendEvent(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEvent(b)
	if err != nil || !cmp.Equal(got, ev) {
		t.Fatalf("round trip: %v %s", err, cmp.Diff(ev, got))
	}
	ev.Model = ""
	if b, _ = AppendEvent(nil, ev); bytes.Contains(b, []byte("model")) {
		t.Fatalf("default pool's event carries a model field: %q", b)
	}
	if got, err = DecodeEvent(b); err != nil || got.Model != "" {
		t.Fatalf("model-less event: %+v %v", got, err)
	}
	ev.Model = strings.Repeat("x", MaxModel+1)
	b, _ = AppendEvent(nil, ev)
	if _, err := DecodeEvent(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("over-long model: %v", err)
	}
}

func TestNewRouterIDDistinct(t *testing.T) {
	a, b := NewRouterID(), NewRouterID()
	if a == 0 || b == 0 || a == b {
		t.Fatalf("ids %d %d", a, b)
	}
}
