package sequences

import (
	"errors"
	"testing"
	"time"
)

// TestExpiryDefaults: by default a request whose Free was lost is freed
// an hour after it was booked (Dynamo's 3600 s), by a sweep that runs at
// most every 30 s, so it goes between 3600 and 3630 s; one booked later
// stays.
func TestExpiryDefaults(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.Expiry != time.Hour || cfg.ExpirySweep != 30*time.Second {
		t.Fatalf("defaults: expiry %v, sweep %v; want 1h and 30s", cfg.Expiry, cfg.ExpirySweep)
	}
	tr := newLedger(t, cfg, wA)
	must(t, tr.AddRequest(Request{ID: "lost", Worker: wA, BlockHashes: chain(1), PrefillTokens: 16}, t0))
	must(t, tr.AddRequest(Request{ID: "later", Worker: wA, BlockHashes: chain(2)}, t0.Add(10*time.Minute)))
	// A generation that outlives five minutes keeps its booking.
	for _, at := range []time.Duration{300 * time.Second, 3599 * time.Second} {
		if ids := tr.Expire(t0.Add(at)); len(ids) != 0 {
			t.Fatalf("at %v: expired %v, want none before an hour", at, ids)
		}
	}
	// Old enough at 3600 s, but the last sweep ran at 3599 s: the next is
	// due at 3629 s.
	if ids := tr.Expire(t0.Add(3600 * time.Second)); len(ids) != 0 {
		t.Fatalf("at 3600 s the sweep is not due yet, expired %v", ids)
	}
	ids := tr.Expire(t0.Add(3629 * time.Second))
	if len(ids) != 1 || ids[0] != "lost" || !tr.Has("later") {
		t.Fatalf("at 3629 s: expired %v, want [lost] with later kept", ids)
	}
	if tr.Stats().Expired != 1 {
		t.Fatalf("expired count %d, want 1", tr.Stats().Expired)
	}
}

// TestExpirySweepIndependentOfExpiry: the sweep interval is its own
// setting, not a tenth of the expiry (a 2 h expiry with a 1 s sweep frees
// a request within a second of its expiry).
func TestExpirySweepIndependentOfExpiry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Expiry, cfg.ExpirySweep = 2*time.Hour, time.Second
	tr := newLedger(t, cfg, wA)
	must(t, tr.AddRequest(Request{ID: "r", Worker: wA, BlockHashes: chain(1)}, t0))
	if ids := tr.Expire(t0.Add(2*time.Hour - time.Millisecond)); len(ids) != 0 {
		t.Fatalf("expired %v before 2 h", ids)
	}
	if ids := tr.Expire(t0.Add(2*time.Hour + time.Second)); len(ids) != 1 {
		t.Fatalf("a second after 2 h: expired %v, want [r]", ids)
	}
}

func TestExpiryConfigValidated(t *testing.T) {
	for _, tc := range []struct {
		expiry, sweep time.Duration
		ok            bool
	}{
		{time.Hour, 30 * time.Second, true},
		{0, 0, true}, // expiry off: no sweep needed
		{time.Hour, 0, false},
		{time.Hour, -time.Second, false},
		{-time.Second, 30 * time.Second, false},
	} {
		cfg := DefaultConfig()
		cfg.Expiry, cfg.ExpirySweep = tc.expiry, tc.sweep
		err := cfg.Validate()
		if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("expiry %v sweep %v: %v, want ok=%v", tc.expiry, tc.sweep, err, tc.ok)
		}
	}
}
