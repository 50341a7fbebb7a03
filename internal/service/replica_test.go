package service

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestReplicaSyncTwoRouters: two `serve` services with
// --router-replica-sync on one embedded NATS (the second connects to the
// first's) split a stream of requests. Each sees the other's bookings (the
// peer's lifecycle events are applied), and once every request has ended
// both show zero load on every worker.
func TestReplicaSyncTwoRouters(t *testing.T) {
	sync1 := func(c *config.Config) { c.EventPlane.ReplicaSync = true }
	r1 := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS, cfg: sync1})
	r1.waitExact()

	r2, stop2 := r1.secondRouter(0)
	defer stop2()
	if r2.svc.RouterID() == 0 || r2.svc.RouterID() == r1.svc.RouterID() {
		t.Fatalf("router ids %d and %d", r1.svc.RouterID(), r2.svc.RouterID())
	}
	r2.waitExact()
	poll.UntilState(r1.t, 10*time.Second, func() (bool, string) {
		p1, p2 := r1.metric("kvrouter_replica_peers"), r2.metric("kvrouter_replica_peers")
		return p1 == 1 && p2 == 1, fmt.Sprintf("peers %v and %v", p1, p2)
	}, "each router sees the other")

	ps := prompts(24, 11)
	var wg sync.WaitGroup
	for i, p := range ps {
		r := r1
		if i%2 == 1 {
			r = r2
		}
		wg.Go(func() {
			resp, body := r.post("/v1/completions", map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": p, "max_tokens": 8})
			if resp.StatusCode != http.StatusOK {
				t.Errorf("completion: %d %s", resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	for _, r := range []*rig{r1, r2} {
		poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
			n := r.metric("kvrouter_replica_events_received_total", "result", "applied")
			return n > 0, fmt.Sprintf("%v peer events applied", n)
		}, "peer bookings applied")
	}
	for i, r := range []*rig{r1, r2} {
		poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
			for _, l := range r.svc.Router().Loads() {
				if l.ActiveRequests != 0 || l.ActiveBlocks != 0 {
					return false, fmt.Sprintf("%s: %d requests, %v blocks", l.Worker, l.ActiveRequests, l.ActiveBlocks)
				}
			}
			return true, ""
		}, fmt.Sprintf("router %d drains to zero load", i+1))
	}

	// The second router stops: the first keeps no booking of it.
	stop2()
	poll.UntilState(r1.t, 10*time.Second, func() (bool, string) {
		p := r1.metric("kvrouter_replica_peers")
		return p == 0, fmt.Sprintf("%v peers", p)
	}, "departed replica forgotten")
}
