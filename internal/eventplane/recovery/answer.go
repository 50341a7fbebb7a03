package recovery

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/localindex"
)

// Answer is what a worker rank's local indexer replies to req:
//
//   - no start, an empty buffer, or a start older than the buffer: a tree
//     dump plus the id of the last real event;
//   - end before start: InvalidRange;
//   - start past the newest event: TooNew (except an open range starting
//     right after the newest: no events);
//   - otherwise the buffered events start..end (end cut to the newest).
//
// Event ids count from 1 in the local indexer, so a start of 0 is read as 1.
// A request for another worker rank than self gets KindError.
func Answer(self kvevent.Worker, rec localindex.Recovery, req Request) Reply {
	if req.Worker != self {
		return Reply{Kind: KindError, Err: fmt.Sprintf("asked %v, this is %v", req.Worker, self)}
	}
	last := rec.LastEventID()
	if req.HasStart && req.HasEnd && req.End < req.Start {
		return Reply{Kind: KindInvalidRange, Start: req.Start, End: req.End, LastEventID: last}
	}
	if !req.HasStart || last == 0 {
		return dump(rec)
	}
	start := max(req.Start, 1)
	end := last
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
		return dump(rec)
	case errors.Is(err, localindex.ErrTooNew):
		return Reply{Kind: KindTooNew, Start: req.Start, End: end, NewestAvailable: rec.LastEventID()}
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

func dump(rec localindex.Recovery) Reply {
	last, evs := rec.Dump()
	return Reply{Kind: KindTreeDump, Events: evs, LastEventID: last}
}
