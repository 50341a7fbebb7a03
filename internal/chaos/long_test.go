//go:build chaos

package chaos

import "testing"

// longSchedules is -chaos.schedules, or when it is not set def, or short
// under -short (the short chaos run: `go test -short -tags chaos`, each
// long suite cut to a schedule or two, under 3 minutes in all).
func longSchedules(def, short int) int {
	switch {
	case *flagSchedules > 0:
		return *flagSchedules
	case testing.Short():
		return short
	}
	return def
}

// TestChaosLong is the full fault suite: many longer schedules (`make
// chaos`). -chaos.schedules sets how many (default 12); -chaos.seed
// replays one.
func TestChaosLong(t *testing.T) {
	var rs []result
	for _, seed := range seeds(longSchedules(12, 2)) {
		rs = append(rs, runSchedule(t, newSchedule(seed, 16)))
	}
	report(t, rs)
}

// TestChaosServiceNATSLong is the full suite on the NATS event plane:
// routers discover workers in the registry; durable mode and replica sync
// are drawn per schedule; NATS restarts and registry expiry join the faults.
func TestChaosServiceNATSLong(t *testing.T) {
	var rs []result
	for _, seed := range seeds(longSchedules(12, 1)) {
		rs = append(rs, runSchedule(t, newNATSSchedule(seed, 16)))
	}
	report(t, rs)
}

// TestChaosNATSLong is the full suite's NATS-path part (component level:
// natsevents publishers and consumers; see nats_test.go).
func TestChaosNATSLong(t *testing.T) {
	var rs []result
	for _, seed := range seeds(longSchedules(12, 3)) {
		rs = append(rs, runNATSSchedule(t, seed, 24))
	}
	report(t, rs)
}
