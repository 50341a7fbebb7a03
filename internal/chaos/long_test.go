//go:build chaos

package chaos

import "testing"

// TestChaosLong is the full fault suite: many longer schedules (`make
// chaos`). -chaos.schedules sets how many (default 12); -chaos.seed
// replays one.
func TestChaosLong(t *testing.T) {
	n := *flagSchedules
	if n <= 0 {
		n = 12
	}
	var rs []result
	for _, seed := range seeds(n) {
		rs = append(rs, runSchedule(t, newSchedule(seed, 16)))
	}
	report(t, rs)
}

// TestChaosServiceNATSLong is the full suite on the NATS event plane:
// routers discover workers in the registry; durable mode and replica sync
// are drawn per schedule; NATS restarts and registry expiry join the faults.
func TestChaosServiceNATSLong(t *testing.T) {
	n := *flagSchedules
	if n <= 0 {
		n = 12
	}
	var rs []result
	for _, seed := range seeds(n) {
		rs = append(rs, runSchedule(t, newNATSSchedule(seed, 16)))
	}
	report(t, rs)
}

// TestChaosNATSLong is the full suite's NATS-path part (component level:
// natsevents publishers and consumers; see nats_test.go).
func TestChaosNATSLong(t *testing.T) {
	n := *flagSchedules
	if n <= 0 {
		n = 12
	}
	var rs []result
	for _, seed := range seeds(n) {
		rs = append(rs, runNATSSchedule(t, seed, 24))
	}
	report(t, rs)
}
