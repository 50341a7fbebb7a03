package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
)

// Sentinel errors. Callers tell refusals apart with errors.Is on these;
// the router's errors wrap them with the request's context.
var (
	// ErrBlockSizeMismatch refuses a worker whose KV block size differs
	// from the router's: its block hashes would never match.
	ErrBlockSizeMismatch = errors.New("worker block size differs from the router's")
	// ErrWorkerInfo refuses malformed worker descriptions.
	ErrWorkerInfo = errors.New("invalid worker info")
	// ErrRequest refuses malformed requests (empty id).
	ErrRequest = errors.New("invalid request")
	// ErrNoCandidates says Route or Plan found no eligible worker rank:
	// none is known, every one is DOWN, or the request's allow-list, pin or
	// dp rank range excludes them all. It is the scheduler's sentinel, so
	// errors.Is matches either name.
	ErrNoCandidates = scheduler.ErrNoCandidates
	// ErrAllBusy says eligible worker ranks exist but every one is over a
	// busy threshold: a retry later may succeed. It is the scheduler's
	// sentinel, so errors.Is matches either name.
	ErrAllBusy = scheduler.ErrAllBusy
	// ErrPinnedBusy says the request is pinned to a worker
	// (Request.HasPinned) whose eligible ranks are all over a busy
	// threshold. Other workers may be free, so it is not ErrAllBusy: a
	// retry later, or elsewhere without the pin, may succeed. The error
	// is a *PinnedBusyError naming the worker.
	ErrPinnedBusy = errors.New("pinned worker is overloaded")
	// ErrDuplicateRequest refuses a Route whose request id is already
	// booked. It is the active-sequence ledger's sentinel.
	ErrDuplicateRequest = sequences.ErrDuplicateRequest
)

// PinnedBusyError is ErrPinnedBusy with the worker it is about; Route and
// Plan return it wrapped, errors.As recovers it.
type PinnedBusyError struct {
	// Worker is the pinned worker.
	Worker kvevent.WorkerID
	// Reason is the busy threshold its first eligible rank is over.
	Reason scheduler.Exclusion
}

// Error names the worker and the threshold.
func (e *PinnedBusyError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("worker %d: %v", e.Worker, ErrPinnedBusy)
	}
	return fmt.Sprintf("worker %d: %v (%s)", e.Worker, ErrPinnedBusy, e.Reason)
}

// Unwrap makes errors.Is(err, ErrPinnedBusy) match.
func (e *PinnedBusyError) Unwrap() error { return ErrPinnedBusy }

// pinnedBusy turns the scheduler's ErrAllBusy for a pinned request into a
// *PinnedBusyError: the only eligible ranks were the pinned worker's.
func pinnedBusy(req *Request, d *scheduler.Decision, err error) error {
	if !req.HasPinned || !errors.Is(err, scheduler.ErrAllBusy) {
		return err
	}
	pe := &PinnedBusyError{Worker: req.PinnedWorker}
	for _, row := range d.Candidates {
		if row.Worker.ID != req.PinnedWorker {
			continue
		}
		switch row.Excluded {
		case scheduler.BusyDecodeBlocks, scheduler.BusyPrefillTokens, scheduler.BusyPrefillFrac:
			pe.Reason = row.Excluded
			return pe
		}
	}
	return pe
}
