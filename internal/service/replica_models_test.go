package service

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestReplicaSyncTwoModels: two replicas serving two models; requests for
// the second model sent to the first router only are applied by the
// second router (its second model's pool: its default pool has none of
// those workers and would refuse them), and none is counted as unapplied
// or for an unknown model.
func TestReplicaSyncTwoModels(t *testing.T) {
	const other = "org/other-model"
	r1 := newRig(t, rigOpt{workers: 4, plane: config.PlaneNATS,
		models: []FleetModel{{Name: "Qwen/Qwen3-0.6B", BlockSize: 16}, {Name: other, BlockSize: 32}},
		cfg: func(c *config.Config) {
			c.EventPlane.ReplicaSync = true
			c.Models = []config.ModelSpec{{Name: other}}
		}})
	r1.waitExact()

	r2, stop2 := r1.secondRouter(0)
	defer stop2()
	r2.waitExact()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		p1, p2 := r1.metric("kvrouter_replica_peers"), r2.metric("kvrouter_replica_peers")
		return p1 == 1 && p2 == 1, fmt.Sprintf("peers %v and %v", p1, p2)
	}, "each router sees the other")

	const n = 4
	for _, p := range prompts(n, 13) {
		resp, body := r1.post("/v1/completions", map[string]any{"model": other, "prompt": p, "max_tokens": 2})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("completion: %d %s", resp.StatusCode, body)
		}
	}
	// Each request is an AddRequest and a Free at least.
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		a := r2.metric("kvrouter_replica_events_received_total", "result", "applied")
		return a >= 2*n, fmt.Sprintf("%v peer events applied", a)
	}, "second model's bookings applied on the peer")
	if u, m := r2.metric("kvrouter_replica_events_received_total", "result", "unapplied"), r2.metric("kvrouter_replica_unknown_model_total"); u != 0 || m != 0 {
		t.Fatalf("peer refused events: %v unapplied, %v unknown model", u, m)
	}
	poll.UntilState(t, 10*time.Second, r2.noBookings, "peer drains to zero load")
}
