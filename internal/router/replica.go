package router

import "time"

// SetObserver replaces the observer of local lifecycle events (nil turns it
// off). Replica sync is built after the router it observes, so it attaches
// itself here; the swap is atomic with respect to Route, MarkPrefillCompleted
// and Free (all of them call the observer under the router's lock).
func (r *Router) SetObserver(o Observer) {
	r.mu.Lock()
	r.observer = o
	r.mu.Unlock()
}

// Shadows books replica sync's anti-herding shadow bookings around Route
// (package replica/core). Route calls Tick first, so that shadows whose
// time has passed leave the load before the decision, and BookShadows
// after it booked a request, to book that request's copies for the live
// peers. Both run on Route's goroutine outside the router's lock, with the
// one clock reading Route took, and may call the router (but not Route).
type Shadows interface {
	Tick(now time.Time)
	BookShadows(requestID string, now time.Time)
}

// shadowsRef boxes a Shadows for an atomic swap.
type shadowsRef struct{ s Shadows }

// SetShadows attaches replica sync's shadow booking to Route (nil detaches
// it). Like SetObserver it may be called while Route runs.
func (r *Router) SetShadows(s Shadows) {
	if s == nil {
		r.shadows.Store(nil)
		return
	}
	r.shadows.Store(&shadowsRef{s: s})
}

// Booked reports whether request id (local or another router's) is
// currently booked. Replica sync uses it to forget peers' requests that the
// ledger expired.
func (r *Router) Booked(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.seq.WorkerOf(id)
	return ok
}
