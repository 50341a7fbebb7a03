package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// waitExact waits until /v1/workers lists exactly the fleet's workers, all
// EXACT.
func (r *rig) waitExact() {
	r.t.Helper()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		ws := r.workers()
		if len(ws) != len(r.fleet.Workers) {
			return false, "workers " + strings.Join(keys(ws), ", ")
		}
		for name, st := range ws {
			if st[0] != "EXACT" {
				return false, name + " is " + st[0] + " (" + st[1] + ")"
			}
		}
		return true, ""
	}, "every worker discovered and EXACT")
}

func keys(m map[string][2]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v[0])
	}
	return out
}

// TestNATSDiscoveryAndEvents: mock workers register in the router's
// embedded NATS registry and publish RouterEvents there (as `kvrouter up`
// runs them); the router discovers them, follows their events, and after a
// request stream /v1/query equals the engines' true prefix state, also with
// live events lost (repaired from the workers' local indexers). A worker
// that deregisters is removed and its blocks dropped.
func TestNATSDiscoveryAndEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults server.Faults
	}{
		{"clean", server.Faults{}},
		{"lossy", server.Faults{DropEvents: 0.3, DuplicateEvents: 0.1, Seed: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpt{workers: 3, plane: config.PlaneNATS, faults: tc.faults})
			r.waitExact()
			r.matchEngines(prompts(18, 3), tc.faults.DropEvents > 0)
			if r.metric("kvrouter_eventplane_events_applied_total") == 0 {
				t.Error("no event went through the NATS event plane")
			}
			if tc.faults.DropEvents > 0 {
				return
			}
			// An updated registration (more KV blocks) reaches the router.
			w1 := r.fleet.Workers[1]
			rec := fleet.WorkerRecord{ID: fleet.DeriveID(w1.Name), Name: w1.Name, URL: w1.URL, BlockSize: w1.BlockSize,
				DPSize: 1, KVCapacityBlocks: 12345, Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract()}
			if err := w1.lease.Update(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
				infos, _ := r.svc.Router().Workers()
				for _, in := range infos {
					if in.ID == rec.ID {
						return in.KVCapacityBlocks == 12345, fmt.Sprintf("capacity %d", in.KVCapacityBlocks)
					}
				}
				return false, "worker gone"
			}, "updated capacity in the router")
			gone := r.fleet.Workers[0]
			if err := gone.Stop(); err != nil {
				t.Fatal(err)
			}
			poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
				_, ok := r.workers()[gone.Name]
				return !ok, "still listed"
			}, "deregistered worker removed")
			for _, p := range prompts(18, 3) {
				if n := r.query(p)[gone.Name]; n != 0 {
					t.Fatalf("removed worker %s still holds %d blocks of a prompt", gone.Name, n)
				}
			}
		})
	}
}

// TestZMQEventPlane: with --event-plane zmq the router reads the static
// workers' RouterEvents over ZMQ (no NATS anywhere) and ends with the
// engines' exact state.
func TestZMQEventPlane(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2, plane: config.PlaneZMQ})
	if r.svc.Bus() != nil {
		t.Fatal("--event-plane zmq started NATS")
	}
	r.waitExact()
	r.matchEngines(prompts(12, 4), true)
	if code, _ := r.get("/ready"); code != http.StatusOK {
		t.Fatalf("/ready %d", code)
	}
}

// TestDurableEventPlane: with --durable-kv-events the router reads the
// workers' events through its JetStream durable consumer and ends with the
// engines' exact state; the index snapshot lands in the Object Store once
// the stream passes --router-snapshot-threshold.
func TestDurableEventPlane(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS, cfg: func(c *config.Config) {
		c.EventPlane.Durable = true
		c.EventPlane.SnapshotThreshold = 5
		c.Router.ID = 7
	}})
	r.waitExact()
	r.matchEngines(prompts(12, 5), false)
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		n := r.metric("kvrouter_durable_snapshots_total")
		return n > 0, fmt.Sprintf("%v snapshots, %v events received", n, r.metric("kvrouter_durable_events_received_total"))
	}, "a snapshot written")
}
