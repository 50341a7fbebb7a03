package recovery

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func storedEv(h uint64) kvevent.Event {
	return kvevent.Event{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h * 7}}}
}

// Event ids count from 0: a dump of a worker that has numbered no event
// yet expects id 0 next (it is applied, not taken for a duplicate), and a
// lost event 0 right after such a dump is a gap asked as 0..0.
func TestStreamIDZeroAfterEmptyDump(t *testing.T) {
	pub := localindex.New(testWorker, 8)
	s := NewStream(testWorker, 0)
	st := s.Reply(Answer(testWorker, pub, s.Start().Query))
	if !st.Clear || len(st.Apply) != 0 {
		t.Fatalf("empty dump step: %+v", st)
	}
	if _, ok := s.Last(); ok {
		t.Fatal("an empty dump must leave no last event")
	}
	ev0 := pub.Apply([]kvevent.Event{storedEv(1)})[0]
	if ev0.ID != 0 {
		t.Fatalf("first id %d", ev0.ID)
	}
	st = s.Live(ev0, 0)
	if len(st.Apply) != 1 || st.Dropped != 0 || st.HasQuery {
		t.Fatalf("event 0 after an empty dump must be applied: %+v", st)
	}
	if last, ok := s.Last(); !ok || last != 0 {
		t.Fatalf("last %d %v, want 0", last, ok)
	}
	if st = s.Live(ev0, 0); st.Dropped != 1 || len(st.Apply) != 0 {
		t.Fatalf("event 0 again is a duplicate: %+v", st)
	}

	// Another empty worker: its event 0 is lost, event 1 reveals the gap.
	pub2 := localindex.New(testWorker, 8)
	s2 := NewStream(testWorker, 0)
	s2.Reply(Answer(testWorker, pub2, s2.Start().Query))
	pub2.Apply([]kvevent.Event{storedEv(5)})
	ev1 := pub2.Apply([]kvevent.Event{storedEv(6)})[0]
	st = s2.Live(ev1, 0)
	if !st.Gap || st.Query != RangeRequest(testWorker, 0, 0) {
		t.Fatalf("gap after an empty dump must ask 0..0: %+v", st)
	}
	st = s2.Reply(Answer(testWorker, pub2, st.Query))
	if len(st.Apply) != 2 || st.Apply[0].ID != 0 || st.Apply[1].ID != 1 {
		t.Fatalf("recovered: %+v", st)
	}
}

// A dump whose last event id is 0 (one event numbered) expects id 1 next:
// event 2 is a gap 1..1, event 0 a duplicate.
func TestStreamGapAfterDumpAtIDZero(t *testing.T) {
	pub := localindex.New(testWorker, 8)
	pub.Apply([]kvevent.Event{storedEv(1)})
	s := NewStream(testWorker, 0)
	rep := Answer(testWorker, pub, s.Start().Query)
	if rep.NoEvents || rep.LastEventID != 0 || len(rep.Events) != 1 {
		t.Fatalf("dump at id 0: %+v", rep)
	}
	s.Reply(rep)
	pub.Apply([]kvevent.Event{storedEv(2)})
	ev2 := pub.Apply([]kvevent.Event{storedEv(3)})[0]
	if st := s.Live(kvevent.Event{Worker: testWorker, ID: 0, Kind: kvevent.Cleared}, 0); st.Dropped != 1 {
		t.Fatalf("event 0 after a dump at 0 is a duplicate: %+v", st)
	}
	st := s.Live(ev2, 0)
	if !st.Gap || st.Query != RangeRequest(testWorker, 1, 1) {
		t.Fatalf("gap must ask 1..1: %+v", st)
	}
}

// The reply's "no event yet" survives the wire (last_event_id nil), and an
// explicit last id 0 stays a real id.
func TestReplyNoEventsOnTheWire(t *testing.T) {
	for _, r := range []Reply{{Kind: KindTreeDump, NoEvents: true}, {Kind: KindTreeDump, LastEventID: 0}} {
		parts, err := EncodeReply(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodePart(parts[0])
		if err != nil || p.NoEvents != r.NoEvents || p.LastEventID != 0 {
			t.Fatalf("%+v came back as %+v (%v)", r, p.Reply, err)
		}
	}
}

// A publisher replaced by a newer one (the dump answer came from another
// process) is retired: its late events, as a durable stream replays them
// after the new process's, are dropped instead of asking for a dump each.
func TestStreamRetiresReplacedPublisher(t *testing.T) {
	const oldPub, newPub = 11, 22
	old := localindex.New(testWorker, 8)
	cur := localindex.New(testWorker, 8)
	for h := range uint64(3) {
		cur.Apply([]kvevent.Event{storedEv(h + 1)})
	}
	s := NewStream(testWorker, 0)
	s.Reply(answerAs(cur, s.Start().Query, newPub))
	// A late event of the old process: looks like a restart at first.
	st := s.Live(old.Apply([]kvevent.Event{storedEv(9)})[0], oldPub)
	if !st.Restart || !st.HasQuery {
		t.Fatalf("first event of another publisher: %+v", st)
	}
	st = s.Reply(answerAs(cur, st.Query, newPub))
	if !st.Clear || st.HasQuery {
		t.Fatalf("dump from the current publisher: %+v", st)
	}
	// From now on the old publisher's events are dropped, no new query.
	for range 3 {
		st = s.Live(old.Apply([]kvevent.Event{storedEv(9)})[0], oldPub)
		if st.HasQuery || len(st.Apply) != 0 || st.Dropped != 1 {
			t.Fatalf("retired publisher's event: %+v", st)
		}
	}
	st = s.Live(cur.Apply([]kvevent.Event{storedEv(4)})[0], newPub)
	if len(st.Apply) != 1 || st.HasQuery {
		t.Fatalf("current publisher's next event: %+v", st)
	}
	if p := s.Publisher(); p != newPub {
		t.Fatalf("publisher %d", p)
	}
}

// A resumed stream (restored from a snapshot) asks for the events after
// its last one; a restarted publisher is then noticed by the answer's
// publisher id and resolved by a dump.
func TestStreamResume(t *testing.T) {
	const pubID = 5
	pub := localindex.New(testWorker, 8)
	for h := range uint64(5) {
		pub.Apply([]kvevent.Event{storedEv(h + 1)})
	}
	s := NewStream(testWorker, 0)
	s.Resume(2, pubID)
	st := s.Start()
	if st.Query != (Request{Worker: testWorker, HasStart: true, Start: 3}) {
		t.Fatalf("resumed start: %+v", st)
	}
	st = s.Reply(answerAs(pub, st.Query, pubID))
	if st.Clear || len(st.Apply) != 2 || st.Apply[0].ID != 3 {
		t.Fatalf("resumed answer: %+v", st)
	}
	// Resumed against a process that restarted since (and has more events
	// than we had): the new publisher id forces a dump.
	s2 := NewStream(testWorker, 0)
	s2.Resume(1, pubID+1)
	st = s2.Reply(answerAs(pub, s2.Start().Query, pubID))
	if !st.Restart || !st.HasQuery || st.Query.HasStart {
		t.Fatalf("restarted publisher: %+v", st)
	}
	st = s2.Reply(answerAs(pub, st.Query, pubID))
	if !st.Clear || len(st.Apply) != 5 {
		t.Fatalf("dump: %+v", st)
	}
}

// Frozen reports every rank's position after the live events fed before
// it, while nothing is applied: the view then holds exactly what those
// positions say.
func TestTrackerFrozenPositions(t *testing.T) {
	x := localindex.New(testWorker, 64)
	q := &fakeQuerier{x: x}
	v := &lockedView{n: naive{}}
	tr, err := NewTracker(DefaultConfig(), q, v, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tr.Add(testWorker)
	for h := range uint64(20) {
		tr.Live(x.Apply([]kvevent.Event{storedEv(h + 1)})[0], 0)
	}
	poll.Until(t, 5*time.Second, func() bool { return maps.Equal(v.get(), truth(x)) }, "initial dump and live events applied")
	for h := range uint64(20) {
		tr.Live(x.Apply([]kvevent.Event{storedEv(h + 100)})[0], 0)
	}
	var pos map[kvevent.WorkerRank]Position
	var view naive
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Frozen(ctx, func(p map[kvevent.WorkerRank]Position) { pos, view = p, v.get() }); err != nil {
		t.Fatal(err)
	}
	if pos[testWorker].Last != 39 {
		t.Fatalf("position %+v, want last 39", pos)
	}
	if want := truth(x); !maps.Equal(view, want) {
		t.Fatalf("view at the freeze %v, worker %v", view, want)
	}
	// A resumed rank reports its position before it applied anything.
	other := kvevent.WorkerRank{ID: 43}
	tr.Resume(other, 7, 3)
	if err := tr.Frozen(ctx, func(p map[kvevent.WorkerRank]Position) { pos = p }); err != nil {
		t.Fatal(err)
	}
	if p := pos[other]; p.Publisher != 3 || p.Last < 7 {
		t.Fatalf("resumed rank at %+v", p)
	}
}

// A dump asked of the old process (a stale id-1 event looked like a
// restart) is answered after the new process published: the answer is
// voided and asked again of the new process, whose events keep being
// applied (the answer must not retire the new publisher). Found by
// TestPublisherRestart (natsevents).
func TestStreamPublisherChangeWhileQueryOutstanding(t *testing.T) {
	const p1, p2 = 11, 22
	old := localindex.New(testWorker, 64)
	var evs []kvevent.Event
	for h := range uint64(10) {
		evs = append(evs, old.Apply([]kvevent.Event{storedEv(h + 1)})[0])
	}
	s := NewStream(testWorker, 0)
	s.Reply(answerAs(old, s.Start().Query, p1))
	st := s.Live(evs[1], p1) // late: looks like ids starting over
	if !st.Restart || !st.HasQuery {
		t.Fatalf("late id 1: %+v", st)
	}
	stale := st.Query
	cur := localindex.New(testWorker, 64)
	ev0 := cur.Apply([]kvevent.Event{storedEv(100)})[0]
	if st := s.Live(ev0, p2); !st.Restart || st.HasQuery {
		t.Fatalf("new publisher while pending: %+v", st)
	}
	st = s.Reply(answerAs(old, stale, p1))
	if st.Clear || !st.HasQuery || st.Query.HasStart {
		t.Fatalf("the old process's answer must be voided and a dump asked again: %+v", st)
	}
	st = s.Reply(answerAs(cur, st.Query, p2))
	if !st.Clear || len(st.Apply) != 1 || st.Apply[0].Blocks[0].EngineHash != 100 {
		t.Fatalf("dump of the new process: %+v", st)
	}
	ev1 := cur.Apply([]kvevent.Event{storedEv(101)})[0]
	if st := s.Live(ev1, p2); len(st.Apply) != 1 || st.HasQuery {
		t.Fatalf("the new process's next event: %+v", st)
	}
	if st := s.Live(old.Apply([]kvevent.Event{storedEv(9)})[0], p1); len(st.Apply) != 0 || st.HasQuery {
		t.Fatalf("the old process's late event after the new one's dump: %+v", st)
	}
}
