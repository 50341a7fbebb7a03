package recovery

import (
	"maps"
	"testing"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"pgregory.net/rapid"
)

var testWorker = kvevent.WorkerRank{ID: 42, Rank: 1}

type blockKey struct {
	tier kvevent.Tier
	hash uint64
}

// naive is the expected index of one worker rank: engine hash -> local hash
// per tier; Cleared empties it.
type naive map[blockKey]uint64

func (n naive) apply(ev kvevent.Event) {
	switch ev.Kind {
	case kvevent.Stored:
		for _, b := range ev.Blocks {
			n[blockKey{ev.Tier, b.EngineHash}] = b.LocalHash
		}
	case kvevent.Removed:
		for _, h := range ev.Removed {
			delete(n, blockKey{ev.Tier, h})
		}
	case kvevent.Cleared:
		clear(n)
	}
}

func truth(x *localindex.Index) naive {
	n := naive{}
	_, evs := x.Dump()
	for _, ev := range evs {
		n.apply(ev)
	}
	return n
}

func genEvent(t *rapid.T) kvevent.Event {
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		return kvevent.Event{Kind: kvevent.Cleared}
	case 1, 2, 3:
		hs := rapid.SliceOfN(rapid.Uint64Range(1, 30), 1, 3).Draw(t, "rm")
		return kvevent.Event{Kind: kvevent.Removed, Removed: hs, Tier: kvevent.Tier(rapid.IntRange(0, 1).Draw(t, "tier"))}
	}
	hs := rapid.SliceOfN(rapid.Uint64Range(1, 30), 1, 4).Draw(t, "st")
	ev := kvevent.Event{Kind: kvevent.Stored, Tier: kvevent.Tier(rapid.IntRange(0, 1).Draw(t, "tier"))}
	for _, h := range hs {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: h, LocalHash: h*7 + 1})
	}
	return ev
}

// A publisher's events reach the stream with random loss, duplication and
// publisher restarts (a fresh local indexer with ids from 0 and a new
// publisher id); queries are answered (or fail) at random moments. After a
// final resync the router's view equals the publisher's true block set.
func TestStreamMatchesPublisher(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 16).Draw(t, "cap")
		pub := localindex.New(testWorker, capacity)
		pubID := uint64(1)
		s := NewStream(testWorker, rapid.IntRange(1, 20).Draw(t, "maxheld"))
		got := naive{}
		var pending *Request
		exec := func(st Step) {
			if st.Clear {
				clear(got)
			}
			for _, ev := range st.Apply {
				got.apply(ev)
			}
			if st.HasQuery {
				if pending != nil {
					t.Fatalf("second query %v while %v outstanding", st.Query, *pending)
				}
				q := st.Query
				pending = &q
			}
		}
		answer := func() {
			req := *pending
			pending = nil
			if rapid.IntRange(0, 9).Draw(t, "fail") == 0 {
				exec(s.Failed(errTest))
				return
			}
			exec(s.Reply(answerAs(pub, req, pubID)))
		}
		exec(s.Start())
		steps := rapid.IntRange(1, 80).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 19).Draw(t, "action") {
			case 0:
				pub = localindex.New(testWorker, capacity)
				pubID++
			case 1, 2, 3:
				if pending != nil {
					answer()
				}
			case 4:
				exec(s.Retry())
			default:
				evs := pub.Apply([]kvevent.Event{genEvent(t)})
				switch rapid.IntRange(0, 5).Draw(t, "deliver") {
				case 0: // lost
				case 1:
					exec(s.Live(evs[0], pubID))
					exec(s.Live(evs[0], pubID))
				default:
					exec(s.Live(evs[0], pubID))
				}
			}
		}
		// Settle: answer everything, then resync (the last events may have
		// been lost with nothing after them to reveal the gap).
		for round := 0; round < 20; round++ {
			for pending != nil {
				req := *pending
				pending = nil
				exec(s.Reply(answerAs(pub, req, pubID)))
			}
			if s.Failing() {
				exec(s.Retry())
				continue
			}
			if round == 0 {
				exec(s.Resync())
				continue
			}
			break
		}
		if pending != nil {
			t.Fatalf("still pending %v", *pending)
		}
		if want := truth(pub); !maps.Equal(got, want) {
			t.Fatalf("router view %v, publisher %v", got, want)
		}
		if ok, why := s.Exact(); !ok {
			t.Fatalf("not exact after settling: %s", why)
		}
	})
}

type testErr string

func (e testErr) Error() string { return string(e) }

const errTest = testErr("injected query failure")

func TestStreamWorkedExample(t *testing.T) {
	pub := localindex.New(testWorker, 4)
	for i := range 3 {
		pub.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: uint64(i + 1), LocalHash: 100}}}})
	}
	s := NewStream(testWorker, 0)
	st := s.Start()
	if !st.HasQuery || st.Query.HasStart {
		t.Fatalf("start must ask for a dump: %+v", st)
	}
	st = s.Reply(Answer(testWorker, pub, st.Query))
	if !st.Clear || len(st.Apply) != 3 {
		t.Fatalf("dump step: %+v", st)
	}
	if last, ok := s.Last(); !ok || last != 2 {
		t.Fatalf("last %d %v (ids count from 0)", last, ok)
	}
	// Event 3 lost, 4 arrives: ask 3..3.
	ev3 := pub.Apply([]kvevent.Event{{Kind: kvevent.Removed, Removed: []uint64{1}}})[0]
	ev4 := pub.Apply([]kvevent.Event{{Kind: kvevent.Removed, Removed: []uint64{2}}})[0]
	st = s.Live(ev4, 0)
	if !st.Gap || !st.HasQuery || st.Query.Start != 3 || st.Query.End != 3 || len(st.Apply) != 0 {
		t.Fatalf("gap step: %+v", st)
	}
	// A duplicate of 2 while recovering is held, then dropped.
	s.Live(kvevent.Event{Worker: testWorker, ID: 2, Kind: kvevent.Cleared}, 0)
	st = s.Reply(Answer(testWorker, pub, st.Query))
	if len(st.Apply) != 2 || st.Apply[0].ID != ev3.ID || st.Apply[1].ID != ev4.ID || st.Dropped != 1 {
		t.Fatalf("recovered step: %+v", st)
	}
	// A resync with nothing missed gets no events and stays exact.
	st = s.Resync()
	if st.Query.Start != 5 || st.Query.HasEnd {
		t.Fatalf("resync: %+v", st)
	}
	if st = s.Reply(Answer(testWorker, pub, st.Query)); st.HasQuery || len(st.Apply) != 0 {
		t.Fatalf("resync with nothing missed: %+v", st)
	}
	if ok, why := s.Exact(); !ok {
		t.Fatal(why)
	}
	// TooNew (the worker restarted behind us) asks for a dump.
	st = s.Resync()
	st = s.Reply(Answer(testWorker, localindex.New(testWorker, 4), st.Query))
	if st.HasQuery {
		// Empty buffer answers with a dump directly.
		t.Fatalf("empty worker must answer with a dump: %+v", st)
	}
	if !st.Clear {
		t.Fatalf("dump of a restarted worker must clear: %+v", st)
	}
	// Ids starting over (bare events, no publisher id) are a restart.
	pub2 := localindex.New(testWorker, 4)
	for range 3 {
		s.Live(pub2.Apply([]kvevent.Event{{Kind: kvevent.Cleared}})[0], 0)
	}
	st = s.Live(kvevent.Event{Worker: testWorker, ID: 1, Kind: kvevent.Cleared}, 0)
	if !st.Restart || !st.HasQuery || st.Query.HasStart {
		t.Fatalf("restart: %+v", st)
	}
}

// answerAs is Answer from the publisher process with id pubID.
func answerAs(x *localindex.Index, req Request, pubID uint64) Reply {
	r := Answer(testWorker, x, req)
	r.PublisherID = pubID
	return r
}
