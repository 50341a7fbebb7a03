package stream

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

var w = kvevent.WorkerRank{ID: 7, Rank: 1}

func stored(id uint64, hash uint64) kvevent.Event {
	return kvevent.Event{Worker: w, ID: id, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: hash, LocalHash: hash}}}
}

func ids(evs []kvevent.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

// TestWorkedExample drives a Stream with hand-written replies (no local
// indexer): the initial dump, a gap filled by a range, a duplicate and a
// publisher restart.
func TestWorkedExample(t *testing.T) {
	s := New(w, 0)
	st := s.Start()
	if !st.HasQuery || st.Query != DumpRequest(w) {
		t.Fatalf("Start = %+v, want a dump request", st)
	}
	// The dump reflects events 0..1; live event 2 arrives meanwhile and
	// is held.
	if st := s.Live(stored(2, 30), 9); len(st.Apply) != 0 || st.HasQuery {
		t.Fatalf("live event while the dump is outstanding: %+v", st)
	}
	st = s.Reply(Reply{Kind: KindTreeDump, Events: []kvevent.Event{stored(0, 10), stored(0, 20)}, LastEventID: 1, PublisherID: 9})
	if !st.Clear || len(st.Apply) != 3 || st.Apply[2].ID != 2 || st.HasQuery {
		t.Fatalf("dump reply: clear %v, apply %v, query %v; want clear, the dump's 2 blocks then event 2", st.Clear, ids(st.Apply), st.HasQuery)
	}
	if last, ok := s.Last(); !ok || last != 2 {
		t.Fatalf("Last() = %d, %v; want 2", last, ok)
	}
	// Events 3 and 4 lost; 5 arrives: a range query for 3..4.
	st = s.Live(stored(5, 50), 9)
	if !st.Gap || st.Query != RangeRequest(w, 3, 4) {
		t.Fatalf("gap: %+v, want a query for 3..4", st)
	}
	st = s.Reply(Reply{Kind: KindEvents, Events: []kvevent.Event{stored(3, 31), stored(4, 41)}, PublisherID: 9})
	if got := ids(st.Apply); len(got) != 3 || got[0] != 3 || got[1] != 4 || got[2] != 5 {
		t.Fatalf("range reply applies %v, want [3 4 5]", got)
	}
	if ok, why := s.Exact(); !ok {
		t.Fatalf("not exact after the gap was filled: %s", why)
	}
	// A duplicate is dropped.
	if st := s.Live(stored(4, 41), 9); st.Dropped != 1 || len(st.Apply) != 0 {
		t.Fatalf("duplicate: %+v", st)
	}
	// A new publisher id is a restart: ask for a dump.
	st = s.Live(stored(0, 70), 10)
	if !st.Restart || !st.HasQuery || st.Query != DumpRequest(w) {
		t.Fatalf("restart: %+v", st)
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindEvents: "events", KindTreeDump: "tree_dump", KindTooNew: "too_new",
		KindInvalidRange: "invalid_range", KindError: "error", 0: "kind(0)", 99: "kind(99)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}
