package recovery

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{DumpRequest(testWorker), RangeRequest(testWorker, 5, 9),
		{Worker: kvevent.WorkerRank{ID: 1 << 60, Rank: 7}, HasStart: true, Start: 3}} {
		got, err := DecodeRequest(EncodeRequest(r))
		if err != nil || got != r {
			t.Fatalf("%v: got %+v, %v", r, got, err)
		}
	}
}

// Pinned request bytes: the documented wire form.
func TestRequestGolden(t *testing.T) {
	b := EncodeRequest(RangeRequest(kvevent.WorkerRank{ID: 7, Rank: 1}, 3, 4))
	want := "\x84\xa9worker_id\x07\xa7dp_rank\x01\xaestart_event_id\x03\xacend_event_id\x04"
	if string(b) != want {
		t.Fatalf("got %q\nwant %q", b, want)
	}
}

// chain returns a local indexer holding one chain of n stored blocks.
func chain(n int) *localindex.Index {
	x := localindex.New(testWorker, 0)
	for i := range n {
		x.Apply([]kvevent.Event{{Kind: kvevent.Stored, HasParent: i > 0, Parent: uint64(i),
			Blocks: []kvevent.Block{{EngineHash: uint64(i + 1), LocalHash: uint64(i * 3)}}}})
	}
	return x
}

func TestReplySplitsAndReassembles(t *testing.T) {
	r := Answer(testWorker, chain(500), DumpRequest(testWorker))
	if r.Kind != KindTreeDump || len(r.Events) != 500 || r.LastEventID != 499 || r.NoEvents {
		t.Fatalf("dump: %v %d %d", r.Kind, len(r.Events), r.LastEventID)
	}
	parts, err := EncodeReply(r, 1000)
	if err != nil || len(parts) < 10 {
		t.Fatalf("parts %d, %v", len(parts), err)
	}
	var a Assembler
	for i, b := range parts {
		p, err := DecodePart(b)
		if err != nil {
			t.Fatal(err)
		}
		done, err := a.Add(p)
		if err != nil || done != (i == len(parts)-1) {
			t.Fatalf("part %d: done %v err %v", i, done, err)
		}
	}
	if diff := cmp.Diff(r, a.Reply()); diff != "" {
		t.Fatalf("reassembled reply differs: %s", diff)
	}
	// Out of order parts are refused.
	var b Assembler
	p, _ := DecodePart(parts[1])
	if _, err := b.Add(p); !errors.Is(err, ErrMalformed) {
		t.Fatalf("out of order: %v", err)
	}
}

func TestAnswerKinds(t *testing.T) {
	x := localindex.New(testWorker, 3)
	if r := Answer(testWorker, x, RangeRequest(testWorker, 0, 5)); r.Kind != KindTreeDump || !r.NoEvents {
		t.Fatalf("empty buffer: %v, no events %v", r.Kind, r.NoEvents)
	}
	for range 5 {
		x.Apply([]kvevent.Event{{Kind: kvevent.Cleared}})
	}
	cases := []struct {
		req  Request
		kind Kind
		n    int
	}{
		{DumpRequest(testWorker), KindTreeDump, 0},
		{RangeRequest(testWorker, 2, 3), KindEvents, 2},
		{RangeRequest(testWorker, 3, 99), KindEvents, 2},
		{Request{Worker: testWorker, HasStart: true, Start: 4}, KindEvents, 1},
		{Request{Worker: testWorker, HasStart: true, Start: 5}, KindEvents, 0},
		{RangeRequest(testWorker, 1, 3), KindTreeDump, 0},
		{RangeRequest(testWorker, 0, 3), KindTreeDump, 0},
		{RangeRequest(testWorker, 5, 9), KindTooNew, 0},
		{RangeRequest(testWorker, 4, 3), KindInvalidRange, 0},
		{RangeRequest(kvevent.WorkerRank{ID: 1}, 4, 4), KindError, 0},
	}
	for _, c := range cases {
		r := Answer(testWorker, x, c.req)
		if r.Kind != c.kind || len(r.Events) != c.n {
			t.Errorf("%v: %v with %d events, want %v with %d", c.req, r.Kind, len(r.Events), c.kind, c.n)
		}
		if r.Kind == KindTooNew && r.NewestAvailable != 4 {
			t.Errorf("too new: newest %d", r.NewestAvailable)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(EncodeRequest(RangeRequest(testWorker, 1, 2)))
	f.Add(EncodeRequest(DumpRequest(testWorker)))
	f.Add([]byte{0x81, 0xa1, 'x', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err == nil {
			if r2, err := DecodeRequest(EncodeRequest(r)); err != nil || r2 != r {
				t.Fatalf("re-encode: %+v %v", r2, err)
			}
		}
	})
}

func FuzzDecodePart(f *testing.F) {
	parts, _ := EncodeReply(Reply{Kind: KindEvents, Events: []kvevent.Event{{Worker: testWorker, ID: 3, Kind: kvevent.Removed, Removed: []uint64{1}}}}, 0)
	f.Add(parts[0])
	parts, _ = EncodeReply(Reply{Kind: KindTooNew, Start: 9, NewestAvailable: 3}, 0)
	f.Add(parts[0])
	f.Add([]byte{0x81, 0xa6, 'e', 'v', 'e', 'n', 't', 's', 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodePart(b)
		if err != nil {
			return
		}
		if p.Count < 1 || p.Index >= p.Count || p.Kind == 0 {
			t.Fatalf("accepted bad part %+v", p)
		}
	})
}

// AddEncoded is DecodePart then Add: it reassembles the same reply, and
// refuses bytes that are no part.
func TestAssemblerAddEncoded(t *testing.T) {
	r := Answer(testWorker, chain(100), DumpRequest(testWorker))
	parts, err := EncodeReply(r, 500)
	if err != nil || len(parts) < 3 {
		t.Fatalf("parts %d, %v", len(parts), err)
	}
	var a Assembler
	for i, b := range parts {
		done, err := a.AddEncoded(b)
		if err != nil || done != (i == len(parts)-1) {
			t.Fatalf("part %d: done %v err %v", i, done, err)
		}
	}
	if diff := cmp.Diff(r, a.Reply()); diff != "" {
		t.Fatalf("reassembled reply differs: %s", diff)
	}
	var b Assembler
	if _, err := b.AddEncoded([]byte{0x91, 0x01}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("not a part: %v", err)
	}
}

func TestNewPublisherID(t *testing.T) {
	seen := map[uint64]bool{}
	for range 1000 {
		id := NewPublisherID()
		if id == 0 || id >= 1<<53 {
			t.Fatalf("id %d outside 1..2^53-1", id)
		}
		seen[id] = true
	}
	if len(seen) < 990 {
		t.Fatalf("only %d distinct ids in 1000", len(seen))
	}
}
