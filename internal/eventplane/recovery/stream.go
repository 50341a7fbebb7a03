package recovery

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// DefaultMaxHeld is how many live events a Stream holds while a query is
// outstanding before it gives up on them and asks for a dump instead.
const DefaultMaxHeld = 1 << 16

// Step is what a Stream asks its driver to do, in this order: clear the
// worker rank (Clear), apply Apply in order, then send Query if set.
type Step struct {
	// Clear drops every block of the worker rank before Apply (a dump is
	// about to be replayed).
	Clear bool
	// Apply are the events to apply to the index, in order.
	Apply []kvevent.Event
	// Query, when HasQuery, is the request to send; no other is
	// outstanding.
	Query    Request
	HasQuery bool
	// Dropped counts duplicates dropped by this step.
	Dropped int
	// Gap is true when this step found a gap in the event ids.
	Gap bool
	// Restart is true when this step detected a publisher restart (a new
	// publisher id, or ids starting over).
	Restart bool
}

// Stream is the router-side state of one worker rank's event stream: the
// last applied event id, the outstanding recovery query and the live events
// held while it runs. It is pure (no I/O, no clock, no goroutines); a driver
// feeds it live events, replies and failures, and executes its Steps.
//
// Rules:
//   - an event whose id is at or below the last applied one is a duplicate
//     and is dropped;
//   - an event past last+1 is a gap: it is held and the range last+1..id-1
//     is asked for;
//   - while a query is outstanding, live events are held and applied (or
//     dropped) once the reply is in;
//   - a dump reply clears the rank, replays the dump and sets last to the
//     dump's last event id; held events at or below it are dropped;
//   - TooNew means the publisher's ids went backwards (it restarted): ask
//     for a dump; so does a publisher id change, or ids starting over at 0
//     or 1 below the last applied id;
//   - when queries fail (no responder, timeout), live events are applied
//     as they come (gaps skipped) and the driver retries a dump later;
//     the rank stays degraded until a recovery succeeds.
type Stream struct {
	w         kvevent.Worker
	maxHeld   int
	synced    bool
	last      uint64
	publisher uint64
	pending   bool
	req       Request
	held      []held
	overflow  bool
	failed    bool
	reason    string
}

// held is a live event held during a query, with its publisher id.
type held struct {
	ev  kvevent.Event
	pub uint64
}

// stale reports whether a held event comes from another publisher than
// the one now followed (it was published before a restart).
func (s *Stream) stale(h held) bool {
	return h.pub != 0 && s.publisher != 0 && h.pub != s.publisher
}

// NewStream returns the stream of worker rank w, not yet synced, holding at
// most maxHeld live events during a query (DefaultMaxHeld when <= 0).
func NewStream(w kvevent.Worker, maxHeld int) *Stream {
	if maxHeld <= 0 {
		maxHeld = DefaultMaxHeld
	}
	return &Stream{w: w, maxHeld: maxHeld, reason: "initial recovery pending"}
}

// Worker returns the stream's worker rank.
func (s *Stream) Worker() kvevent.Worker { return s.w }

// Last returns the last applied event id and whether there is one.
func (s *Stream) Last() (uint64, bool) { return s.last, s.synced }

// Exact reports whether the rank's indexed state is known to be complete:
// synced, no query outstanding, no failed recovery. Reason says why not.
func (s *Stream) Exact() (bool, string) {
	ok := s.synced && !s.pending && !s.failed
	if ok {
		return true, ""
	}
	return false, s.reason
}

// Pending reports whether a query is outstanding.
func (s *Stream) Pending() bool { return s.pending }

// Start asks for a full dump: the worker was just added (and its events
// are already subscribed to), or the stream must start over.
func (s *Stream) Start() Step {
	if s.pending {
		return Step{}
	}
	return s.ask(DumpRequest(s.w), "initial recovery: asking for a dump")
}

// Resync asks for everything after the last applied event (after a
// transport reconnect, when events may have been lost without a trace).
func (s *Stream) Resync() Step {
	switch {
	case s.pending:
		return Step{}
	case !s.synced || s.failed:
		return s.ask(DumpRequest(s.w), "resync: asking for a dump")
	}
	return s.ask(Request{Worker: s.w, HasStart: true, Start: s.last + 1}, fmt.Sprintf("resync: asking for events after %d", s.last))
}

// Retry asks for a dump again after a failed recovery; it does nothing
// when a query is outstanding or nothing failed.
func (s *Stream) Retry() Step {
	if s.pending || !s.failed {
		return Step{}
	}
	return s.ask(DumpRequest(s.w), "retrying recovery with a dump")
}

func (s *Stream) ask(r Request, reason string) Step {
	s.pending, s.req, s.reason = true, r, reason
	return Step{Query: r, HasQuery: true}
}

// Live feeds one live event; publisher is the envelope's publisher id, 0
// when unknown (bare RouterEvents).
func (s *Stream) Live(ev kvevent.Event, publisher uint64) Step {
	var st Step
	s.live(ev, publisher, true, &st)
	return st
}

func (s *Stream) live(ev kvevent.Event, publisher uint64, fresh bool, st *Step) {
	restart := publisher != 0 && s.publisher != 0 && publisher != s.publisher
	if publisher != 0 {
		s.publisher = publisher
	}
	if fresh && s.synced && !restart && ev.ID < s.last && ev.ID <= 1 && !s.pending {
		restart = true
	}
	if restart {
		st.Restart = true
		s.hold(ev, publisher)
		if s.pending {
			// The outstanding answer may come from the old publisher:
			// ask again once it is in.
			s.overflow = true
			return
		}
		q := s.ask(DumpRequest(s.w), "publisher restarted: asking for a dump")
		st.Query, st.HasQuery = q.Query, true
		return
	}
	if s.pending {
		s.hold(ev, publisher)
		return
	}
	switch {
	case !s.synced:
		s.synced, s.last = true, ev.ID
		st.Apply = append(st.Apply, ev)
	case ev.ID <= s.last:
		st.Dropped++
	case ev.ID == s.last+1 || s.failed:
		s.last = ev.ID
		st.Apply = append(st.Apply, ev)
	default:
		st.Gap = true
		s.hold(ev, publisher)
		q := s.ask(RangeRequest(s.w, s.last+1, ev.ID-1), fmt.Sprintf("gap: events %d..%d missing", s.last+1, ev.ID-1))
		st.Query, st.HasQuery = q.Query, true
	}
}

func (s *Stream) hold(ev kvevent.Event, pub uint64) {
	if len(s.held) >= s.maxHeld {
		s.held, s.overflow = s.held[:0], true
	}
	s.held = append(s.held, held{ev, pub})
}

// Reply feeds the answer to the outstanding query.
func (s *Stream) Reply(r Reply) Step {
	var st Step
	if !s.pending {
		return st
	}
	req := s.req
	s.pending = false
	if r.PublisherID != 0 && s.publisher != 0 && r.PublisherID != s.publisher && r.Kind != KindTreeDump {
		// Another process answers than the one we followed: it restarted
		// (and whatever we lost of it cannot be told by ids).
		s.publisher = r.PublisherID
		st.Restart = true
		q := s.ask(DumpRequest(s.w), "publisher restarted (recovery answer from a new publisher): asking for a dump")
		st.Query, st.HasQuery = q.Query, true
		return st
	}
	if r.PublisherID != 0 && r.Kind == KindTreeDump {
		s.publisher = r.PublisherID
	}
	switch r.Kind {
	case KindTreeDump:
		st.Clear = true
		for _, ev := range r.Events {
			ev.Worker = s.w
			st.Apply = append(st.Apply, ev)
		}
		s.synced, s.last, s.failed = true, r.LastEventID, false
		// Held events continue the dump only where contiguous with it:
		// a later event with a hole before it is either stale (from a
		// publisher that restarted since) or will be revealed as a gap by
		// the next live event. Asking again here could loop forever on a
		// stale event.
		hs := s.held
		s.held, s.overflow = nil, false
		for i, h := range hs {
			ev := h.ev
			if s.stale(h) || ev.ID <= s.last {
				st.Dropped++
				continue
			}
			if ev.ID != s.last+1 {
				st.Dropped += len(hs) - i
				break
			}
			s.last = ev.ID
			st.Apply = append(st.Apply, ev)
		}
		s.reason = ""
		return st
	case KindEvents:
		if !s.synced {
			// A range answer to a stream without a baseline: start over.
			return s.ask(DumpRequest(s.w), "range answer without a baseline: asking for a dump")
		}
		for _, ev := range r.Events {
			switch {
			case ev.ID <= s.last:
				st.Dropped++
			case ev.ID == s.last+1:
				ev.Worker = s.w
				s.last = ev.ID
				st.Apply = append(st.Apply, ev)
			default:
				s.overflow = true // a hole in the answer: only a dump can fix it
			}
		}
		if req.HasEnd && s.last < req.End {
			s.overflow = true
		}
	case KindTooNew:
		st.Restart = true
		q := s.ask(DumpRequest(s.w), fmt.Sprintf("worker is behind (newest %d, wanted %d): asking for a dump", r.NewestAvailable, r.Start))
		st.Query, st.HasQuery = q.Query, true
		return st
	default: // InvalidRange, Error
		if req.HasStart {
			q := s.ask(DumpRequest(s.w), fmt.Sprintf("%v answer to %v: asking for a dump", r.Kind, req))
			st.Query, st.HasQuery = q.Query, true
			return st
		}
		return s.fail(fmt.Sprintf("dump refused: %v %s", r.Kind, r.Err))
	}
	s.drain(&st)
	return st
}

// drain replays the held events now that no query is outstanding.
func (s *Stream) drain(st *Step) {
	if s.overflow {
		s.overflow = false
		s.held = s.held[:0]
		q := s.ask(DumpRequest(s.w), "events lost while recovering: asking for a dump")
		st.Query, st.HasQuery = q.Query, true
		return
	}
	hs := s.held
	s.held = nil
	for i, h := range hs {
		if s.stale(h) {
			st.Dropped++
			continue
		}
		s.live(h.ev, 0, false, st)
		if s.pending {
			s.held = append(s.held, hs[i+1:]...)
			return
		}
	}
	if !s.pending && !s.failed {
		s.reason = ""
	}
}

// Failed feeds the failure of the outstanding query (no responder,
// timeout, transport error). Held events are applied as they are (gaps
// skipped) and the stream stays degraded until Retry succeeds.
func (s *Stream) Failed(err error) Step {
	if !s.pending {
		return Step{}
	}
	s.pending = false
	return s.fail(fmt.Sprintf("recovery query %v failed: %v", s.req, err))
}

func (s *Stream) fail(reason string) Step {
	var st Step
	s.failed, s.reason, s.overflow = true, reason, false
	hs := s.held
	s.held = nil
	for _, h := range hs {
		if s.stale(h) {
			st.Dropped++
			continue
		}
		s.live(h.ev, 0, false, &st)
	}
	s.reason = reason
	return st
}

// Failing reports whether the last recovery failed (the driver schedules
// Retry).
func (s *Stream) Failing() bool { return s.failed }
