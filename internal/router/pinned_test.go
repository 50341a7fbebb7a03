package router

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// TestPinnedWorkerBusy: a request pinned to a worker over a busy threshold
// gets ErrPinnedBusy naming that worker, not ErrAllBusy (worker 2 is
// free: an unpinned request goes there); when every worker is busy an
// unpinned request still gets ErrAllBusy.
func TestPinnedWorkerBusy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scheduler.ActivePrefillTokensThreshold = 40
	r := newRouter(t, cfg, serialIndex(t), 2)
	// 48 prompt tokens booked on worker 1: over 40.
	if _, err := r.Route(Request{ID: "a", Tokens: tokens(1, 1, 0, 48), PinnedWorker: 1, HasPinned: true}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Route(Request{ID: "b", Tokens: tokens(1, 2, 0, 16), PinnedWorker: 1, HasPinned: true})
	var pe *PinnedBusyError
	switch {
	case !errors.Is(err, ErrPinnedBusy):
		t.Fatalf("pinned to a busy worker: %v, want ErrPinnedBusy", err)
	case errors.Is(err, ErrAllBusy):
		t.Fatalf("pinned to a busy worker: %v also matches ErrAllBusy, but worker 2 is free", err)
	case !errors.As(err, &pe) || pe.Worker != 1 || pe.Reason != scheduler.BusyPrefillTokens:
		t.Fatalf("pinned error %#v, want worker 1 over the prefill tokens threshold", pe)
	}
	if want := `routing "b": worker 1: pinned worker is overloaded (busy: active prefill tokens over threshold)`; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if _, err := r.Plan(Request{ID: "p", Tokens: tokens(1, 2, 0, 16), PinnedWorker: 1, HasPinned: true}); !errors.Is(err, ErrPinnedBusy) {
		t.Fatalf("Plan pinned to a busy worker: %v, want ErrPinnedBusy", err)
	}
	d, err := r.Route(Request{ID: "c", Tokens: tokens(1, 3, 0, 48)})
	if err != nil || d.Worker.ID != 2 {
		t.Fatalf("unpinned: worker %v, %v; want worker 2", d.Worker, err)
	}
	_, err = r.Route(Request{ID: "d", Tokens: tokens(1, 4, 0, 16)})
	if !errors.Is(err, ErrAllBusy) || errors.Is(err, ErrPinnedBusy) {
		t.Fatalf("unpinned, every worker busy: %v, want ErrAllBusy only", err)
	}
	// Pinned to a worker that is not there: no candidates, not busy.
	if _, err := r.Route(Request{ID: "e", Tokens: tokens(1, 5, 0, 16), PinnedWorker: 9, HasPinned: true}); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("pinned to an unknown worker: %v, want ErrNoCandidates", err)
	}
}
