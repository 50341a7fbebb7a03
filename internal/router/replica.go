package router

// SetObserver replaces the observer of local lifecycle events (nil turns it
// off). Replica sync is built after the router it observes, so it attaches
// itself here; the swap is atomic with respect to Route, MarkPrefillCompleted
// and Free (all of them call the observer under the router's lock).
func (r *Router) SetObserver(o Observer) {
	r.mu.Lock()
	r.observer = o
	r.mu.Unlock()
}

// Booked reports whether request id (local or another router's) is
// currently booked. Replica sync uses it to forget peers' requests that the
// tracker expired.
func (r *Router) Booked(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.seq.WorkerOf(id)
	return ok
}
