//go:build chaos

package chaos

import "testing"

// TestChaosPDLong is the disaggregated part of the full suite (`make
// chaos`): longer PD schedules, on the engine ZMQ plane and the NATS plane
// in turn (durable mode and replica sync drawn from the seed).
func TestChaosPDLong(t *testing.T) {
	var rs []result
	for i, seed := range seeds(longSchedules(12, 1)) {
		rs = append(rs, runSchedule(t, newPDSchedule(seed, 16, i%2 == 1)))
	}
	report(t, rs)
}
