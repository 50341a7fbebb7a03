package stream

import (
	"fmt"
	"slices"

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
// next expected event id, the outstanding recovery query and the live
// events held while it runs. It is pure (no I/O, no clock, no goroutines); a
// driver feeds it live events, replies and failures, and executes its Steps.
//
// Event ids count from 0: the first event a publisher numbers is id 0, a
// real event (not "none yet").
//
// Rules:
//   - an event whose id is below the next expected one is a duplicate and
//     is dropped;
//   - an event past the next expected id is a gap: it is held and the range
//     next..id-1 is asked for;
//   - while a query is outstanding, live events are held and applied (or
//     dropped) once the reply is in;
//   - a dump reply clears the rank, replays the dump and expects the event
//     after the dump's last event id (id 0 when the worker had none); held
//     events below it are dropped;
//   - TooNew means the publisher's ids went backwards (it restarted): ask
//     for a dump; so does a publisher id change, or ids starting over at 0
//     or 1 below the last applied id;
//   - a publisher change seen while a query is outstanding voids its
//     answer (it may come from the old process): a dump is asked again;
//   - a publisher a newer one has been seen to replace (a dump answer
//     came from another id, with no change seen meanwhile) is retired:
//     its late events, as a durable stream replays them, are dropped
//     instead of being taken for yet another restart;
//   - when queries fail (no responder, timeout), live events are applied
//     as they come (gaps skipped) and the driver retries a dump later;
//     the rank stays degraded until a recovery succeeds.
type Stream struct {
	w         kvevent.WorkerRank
	maxHeld   int
	synced    bool
	next      uint64 // next expected event id (when synced)
	publisher uint64
	prev      uint64   // the publisher replaced at the last restart detected
	retired   []uint64 // publishers replaced by a newer one, oldest first
	pending   bool
	switched  bool // the publisher changed while the query was outstanding
	req       Request
	held      []held
	overflow  bool
	failed    bool
	reason    string
}

// maxRetired bounds the retired publisher ids a stream remembers.
const maxRetired = 16

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

// isRetired reports whether publisher was replaced by a newer one.
func (s *Stream) isRetired(publisher uint64) bool {
	return publisher != 0 && slices.Contains(s.retired, publisher)
}

// follow makes current the followed publisher, as told by a recovery
// answer (the process answering now is the live one): every other id seen
// for this rank is retired.
func (s *Stream) follow(current uint64) {
	if current == 0 {
		return
	}
	for _, old := range []uint64{s.publisher, s.prev} {
		if old != 0 && old != current && !slices.Contains(s.retired, old) {
			if len(s.retired) == maxRetired {
				s.retired = s.retired[1:]
			}
			s.retired = append(s.retired, old)
		}
	}
	s.retired = slices.DeleteFunc(s.retired, func(p uint64) bool { return p == current })
	s.publisher, s.prev = current, 0
}

// New returns the stream of worker rank w, not yet synced, holding at
// most maxHeld live events during a query (DefaultMaxHeld when <= 0).
func New(w kvevent.WorkerRank, maxHeld int) *Stream {
	if maxHeld <= 0 {
		maxHeld = DefaultMaxHeld
	}
	return &Stream{w: w, maxHeld: maxHeld, reason: "initial recovery pending"}
}

// Resume makes a new stream continue after event last of publisher (0:
// unknown), as restored from a snapshot; Start then asks for the events
// after last instead of a dump. It does nothing once the stream has
// started.
func (s *Stream) Resume(last, publisher uint64) {
	if s.synced || s.pending {
		return
	}
	s.synced, s.next, s.publisher = true, last+1, publisher
}

// Worker returns the stream's worker rank.
func (s *Stream) Worker() kvevent.WorkerRank { return s.w }

// Last returns the last applied event id and whether there is one.
func (s *Stream) Last() (uint64, bool) {
	if !s.synced || s.next == 0 {
		return 0, false
	}
	return s.next - 1, true
}

// Publisher returns the publisher id followed (0: unknown).
func (s *Stream) Publisher() uint64 { return s.publisher }

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
// are already subscribed to), or the stream must start over. A resumed
// stream asks for the events after its last one instead.
func (s *Stream) Start() Step {
	if s.pending {
		return Step{}
	}
	if s.synced {
		return s.ask(Request{Worker: s.w, HasStart: true, Start: s.next},
			fmt.Sprintf("resumed: asking for events from %d", s.next))
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
	return s.ask(Request{Worker: s.w, HasStart: true, Start: s.next}, fmt.Sprintf("resync: asking for events from %d", s.next))
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
	if s.isRetired(publisher) {
		st.Dropped++ // a late event of a process a newer one replaced
		return
	}
	restart := publisher != 0 && s.publisher != 0 && publisher != s.publisher
	if restart {
		s.prev = s.publisher
	}
	if publisher != 0 {
		s.publisher = publisher
	}
	if fresh && s.synced && !restart && ev.ID <= 1 && ev.ID+1 < s.next && !s.pending {
		restart = true
	}
	if restart {
		st.Restart = true
		s.hold(ev, publisher)
		if s.pending {
			// The outstanding answer may come from the old publisher:
			// ask again once it is in.
			s.switched = true
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
		s.synced, s.next = true, ev.ID+1
		st.Apply = append(st.Apply, ev)
	case ev.ID < s.next:
		st.Dropped++
	case ev.ID == s.next || s.failed:
		s.next = ev.ID + 1
		st.Apply = append(st.Apply, ev)
	default:
		st.Gap = true
		s.hold(ev, publisher)
		q := s.ask(RangeRequest(s.w, s.next, ev.ID-1), fmt.Sprintf("gap: events %d..%d missing", s.next, ev.ID-1))
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
	if s.switched {
		// The publisher changed after the query went out: the answer may
		// be the old process's. Ask the new one (held events stay).
		s.switched = false
		q := s.ask(DumpRequest(s.w), "publisher changed while recovering: asking for a dump again")
		st.Query, st.HasQuery = q.Query, true
		return st
	}
	if r.PublisherID != 0 && s.publisher != 0 && r.PublisherID != s.publisher && r.Kind != KindTreeDump {
		// Another process answers than the one we followed: it restarted
		// (and whatever we lost of it cannot be told by ids). Its dump
		// answer then retires the one we followed.
		s.prev, s.publisher = s.publisher, r.PublisherID
		st.Restart = true
		q := s.ask(DumpRequest(s.w), "publisher restarted (recovery answer from a new publisher): asking for a dump")
		st.Query, st.HasQuery = q.Query, true
		return st
	}
	if r.Kind == KindTreeDump {
		s.follow(r.PublisherID)
	}
	switch r.Kind {
	case KindTreeDump:
		st.Clear = true
		for _, ev := range r.Events {
			ev.Worker = s.w
			st.Apply = append(st.Apply, ev)
		}
		s.synced, s.next, s.failed = true, r.LastEventID+1, false
		if r.NoEvents {
			s.next = 0
		}
		// Held events continue the dump only where contiguous with it:
		// a later event with a hole before it is either stale (from a
		// publisher that restarted since) or will be revealed as a gap by
		// the next live event. Asking again here could loop forever on a
		// stale event.
		hs := s.held
		s.held, s.overflow = nil, false
		for i, h := range hs {
			ev := h.ev
			if s.stale(h) || s.isRetired(h.pub) || ev.ID < s.next {
				st.Dropped++
				continue
			}
			if ev.ID != s.next {
				st.Dropped += len(hs) - i
				break
			}
			s.next = ev.ID + 1
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
			case ev.ID < s.next:
				st.Dropped++
			case ev.ID == s.next:
				ev.Worker = s.w
				s.next = ev.ID + 1
				st.Apply = append(st.Apply, ev)
			default:
				s.overflow = true // a hole in the answer: only a dump can fix it
			}
		}
		if req.HasEnd && s.next <= req.End {
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
		if s.stale(h) || s.isRetired(h.pub) {
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
	s.pending, s.switched = false, false
	return s.fail(fmt.Sprintf("recovery query %v failed: %v", s.req, err))
}

func (s *Stream) fail(reason string) Step {
	var st Step
	s.failed, s.reason, s.overflow = true, reason, false
	hs := s.held
	s.held = nil
	for _, h := range hs {
		if s.stale(h) || s.isRetired(h.pub) {
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

// Kind is what a Reply says.
type Kind uint8

// Reply kinds.
const (
	// KindEvents: the requested range, from the ring buffer.
	KindEvents Kind = iota + 1
	// KindTreeDump: a full dump of the worker's cached blocks, plus the id
	// of the last real event it reflects.
	KindTreeDump
	// KindTooNew: the range starts past the newest event the worker has.
	KindTooNew
	// KindInvalidRange: the range ends before it starts.
	KindInvalidRange
	// KindError: the worker could not answer (Err says why).
	KindError
)

var kindNames = [...]string{KindEvents: "events", KindTreeDump: "tree_dump", KindTooNew: "too_new",
	KindInvalidRange: "invalid_range", KindError: "error"}

// String returns the kind's wire name.
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Request asks one worker rank for events. Both ends are inclusive; no
// start means "send a full dump", no end means "up to the newest".
type Request struct {
	// Worker is the worker rank asked.
	Worker kvevent.WorkerRank
	// HasStart says Start is set; without it the worker sends a dump.
	HasStart bool
	// Start is the first event id wanted.
	Start uint64
	// HasEnd says End is set; without it the range runs to the newest.
	HasEnd bool
	// End is the last event id wanted.
	End uint64
}

// DumpRequest asks w for a full dump.
func DumpRequest(w kvevent.WorkerRank) Request { return Request{Worker: w} }

// RangeRequest asks w for events from..to.
func RangeRequest(w kvevent.WorkerRank, from, to uint64) Request {
	return Request{Worker: w, HasStart: true, Start: from, HasEnd: true, End: to}
}

// String renders the request for logs.
func (r Request) String() string {
	switch {
	case !r.HasStart:
		return fmt.Sprintf("%v dump", r.Worker)
	case !r.HasEnd:
		return fmt.Sprintf("%v [%d..]", r.Worker, r.Start)
	}
	return fmt.Sprintf("%v [%d..%d]", r.Worker, r.Start, r.End)
}

// Reply is a worker's answer to a Request.
type Reply struct {
	// Kind says what the reply is.
	Kind Kind
	// Events are the range's events (KindEvents) or the dump's stored
	// events, parents before children (KindTreeDump).
	Events []kvevent.Event
	// LastEventID is the worker's newest real event id (KindTreeDump: the
	// last event the dump reflects). Ids count from 0, so 0 is a real id
	// unless NoEvents says otherwise.
	LastEventID uint64
	// NoEvents says the worker has numbered no event yet (a dump of an
	// empty local indexer): the next event it publishes is id 0. On the
	// wire, last_event_id is nil.
	NoEvents bool
	// NewestAvailable is the worker's newest event id (KindTooNew).
	NewestAvailable uint64
	// Start and End echo the requested range (KindTooNew,
	// KindInvalidRange).
	Start, End uint64
	// Err says why the worker could not answer (KindError).
	Err string
	// PublisherID is the answering process's envelope publisher id (0:
	// unknown); a change tells the router the publisher restarted even
	// when none of its live events got through.
	PublisherID uint64
}
