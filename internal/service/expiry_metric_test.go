package service

import (
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// TestBookingsExpiredMetric: a booking whose Free never came, freed by
// the ledger's expiry, used to show only as a WARN line; it is counted in
// kvrouter_router_bookings_expired_total. A request that completed (its
// Free came) is not.
func TestBookingsExpiredMetric(t *testing.T) {
	r := newRig(t, rigOpt{cfg: func(c *config.Config) {
		c.Router.RequestExpiry = 500 * time.Millisecond
		c.Router.RequestSweepInterval = 20 * time.Millisecond
		c.Router.SweepInterval = 20 * time.Millisecond
	}})
	ps := prompts(2, 7)
	r.complete(ps[0], 4)
	if n := r.metric("kvrouter_router_bookings_expired_total"); n != 0 {
		t.Fatalf("before any lost Free: %v expired", n)
	}
	// Booked on the core with no request behind it: its Free is lost.
	if _, err := r.svc.Router().Route(router.Request{ID: "lost-free", Tokens: ps[1]}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := r.noBookings(); ok {
		t.Fatal("the booking is not held")
	}
	poll.UntilState(t, 10*time.Second, r.noBookings, "the lost booking to expire")
	if n := r.metric("kvrouter_router_bookings_expired_total"); n != 1 {
		t.Fatalf("%v bookings counted as expired, want 1 (the one whose Free was lost)", n)
	}
	if !strings.Contains(r.logs.String(), "freed expired bookings") {
		t.Fatal("no WARN line for the expired booking")
	}
}
