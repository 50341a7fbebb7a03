package recovery

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Answer is what a worker rank's local indexer replies to req:
//
//   - no start, an empty buffer, or a start older than the buffer: a tree
//     dump plus the id of the last real event (NoEvents when the worker has
//     numbered none yet);
//   - end before start: InvalidRange;
//   - start past the newest event: TooNew (except an open range starting
//     right after the newest: no events);
//   - otherwise the buffered events start..end (end cut to the newest).
//
// Event ids count from 0, so a start of 0 asks for the first event. A
// request for another worker rank than self gets KindError.
func Answer(self kvevent.WorkerRank, rec localindex.Recovery, req Request) Reply {
	if req.Worker != self {
		return Reply{Kind: KindError, Err: fmt.Sprintf("asked %v, this is %v", req.Worker, self)}
	}
	last, ok := rec.LastEventID()
	if req.HasStart && req.HasEnd && req.End < req.Start {
		return Reply{Kind: KindInvalidRange, Start: req.Start, End: req.End, LastEventID: last, NoEvents: !ok}
	}
	if !req.HasStart || !ok {
		return dump(rec, ok)
	}
	start, end := req.Start, last
	if req.HasEnd {
		end = req.End
	}
	if !req.HasEnd && start == last+1 {
		// "Everything after last": nothing was missed.
		return Reply{Kind: KindEvents, LastEventID: last}
	}
	if start > last {
		return Reply{Kind: KindTooNew, Start: req.Start, End: end, NewestAvailable: last, LastEventID: last}
	}
	evs, err := rec.EventsRange(start, max(end, start))
	switch {
	case errors.Is(err, localindex.ErrGone):
		return dump(rec, true)
	case errors.Is(err, localindex.ErrTooNew):
		newest, _ := rec.LastEventID()
		return Reply{Kind: KindTooNew, Start: req.Start, End: end, NewestAvailable: newest}
	case errors.Is(err, localindex.ErrInvalidRange):
		return Reply{Kind: KindInvalidRange, Start: req.Start, End: end}
	case err != nil:
		return Reply{Kind: KindError, Err: err.Error()}
	}
	newest := last
	if n := len(evs); n > 0 {
		newest = max(newest, evs[n-1].ID)
	}
	return Reply{Kind: KindEvents, Events: evs, LastEventID: newest}
}

// dump answers with a tree dump; had says whether the index had numbered an
// event before. When it had not and the dump still shows last id 0, event 0
// may have been numbered meanwhile, in the dump or not: NoEvents makes the
// asker take the live event 0 too (replaying an event already reflected
// leaves the blocks as they are), where claiming id 0 could lose it.
func dump(rec localindex.Recovery, had bool) Reply {
	last, evs := rec.Dump()
	if !had && last == 0 {
		return Reply{Kind: KindTreeDump, Events: evs, NoEvents: true}
	}
	return Reply{Kind: KindTreeDump, Events: evs, LastEventID: last}
}
