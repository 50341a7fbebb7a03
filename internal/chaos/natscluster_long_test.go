//go:build chaos

package chaos

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestChaosNATSClusterLong is the long NATS cluster suite: seeded random
// schedules of 8 cluster faults each (every kind of TestChaosNATSCluster,
// plus crashes of the registry bucket's and the snapshot store's leaders),
// nodes down for 0.1–3 s (past the registry TTL at times: clients move to
// the other nodes), partitions of 2.5 registration TTLs (at most 10 s). The TTL
// alternates between schedules: 1 s (far shorter than the election a
// crashed leader costs: registrations expire, routers drop and re-add
// workers) and 10 s (kvrouter's default; the count of removals is
// reported). -chaos.schedules sets how many (default
// 4, 1 under -short); -chaos.seed replays one.
func TestChaosNATSClusterLong(t *testing.T) {
	var rs []result
	for i, seed := range seeds(longSchedules(4, 1)) {
		rng := rand.New(rand.NewPCG(seed, 22))
		var faults []clusterFault
		for range 8 {
			faults = append(faults, clusterFault(rng.IntN(int(numClusterFaults))))
		}
		ttl := []time.Duration{time.Second, 10 * time.Second}[i%2]
		rs = append(rs, runClusterSchedule(t, seed, ttl, faults, func(r *rand.Rand) time.Duration {
			return time.Duration(100+r.IntN(2900)) * time.Millisecond
		}))
	}
	report(t, rs)
}
