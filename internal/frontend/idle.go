package frontend

import (
	"sync/atomic"
	"time"
)

// idleTimer cancels an upstream request when its worker stays silent for
// the stream idle timeout. It runs only while the proxy waits on the
// worker (arm before a read, disarm after it), so a slow client is never
// taken for a silent worker. A nil *idleTimer (timeout 0) does nothing.
type idleTimer struct {
	d   time.Duration
	t   *time.Timer
	hit atomic.Bool
}

// newIdleTimer returns a disarmed timer that calls cancel on expiry, or
// nil when d is 0.
func newIdleTimer(d time.Duration, cancel func()) *idleTimer {
	if d <= 0 {
		return nil
	}
	it := &idleTimer{d: d}
	it.t = time.AfterFunc(d, func() {
		it.hit.Store(true)
		cancel()
	})
	it.t.Stop()
	return it
}

// arm starts (or restarts) the countdown.
func (it *idleTimer) arm() {
	if it != nil {
		it.t.Reset(it.d)
	}
}

// disarm stops the countdown.
func (it *idleTimer) disarm() {
	if it != nil {
		it.t.Stop()
	}
}

// expired reports whether the timer fired (and cancelled the request).
func (it *idleTimer) expired() bool { return it != nil && it.hit.Load() }
