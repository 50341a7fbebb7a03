package router

import (
	"errors"

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
	// ErrDuplicateRequest refuses a Route whose request id is already
	// booked. It is the active-sequence ledger's sentinel.
	ErrDuplicateRequest = sequences.ErrDuplicateRequest
)
