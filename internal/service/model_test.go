package service

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// TestWorkerStateMatchesModel drives a two-rank worker through random
// stream states, health probes, silence checks and event arrivals, and
// checks its published state against a naive model of the rules in
// doc.go: DOWN after `limit` failed probes in a row until one succeeds (a
// probe that timed out while events arrived after it was sent counts as
// neither);
// else DEGRADED while any rank is not EXACT or events have been silent
// for the window while requests run; else EXACT.
func TestWorkerStateMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := newStateSet(t, dpWorker)
		id := fleet.DeriveID("w2")
		const limit = 2
		window := 60 * time.Second
		// The model.
		ranks := []vllmzmq.State{vllmzmq.StateSyncing, vllmzmq.StateSyncing}
		failures, down := 0, false
		lastEvent := s.now
		var busySince time.Time
		silent := false

		for i := range rapid.IntRange(1, 60).Draw(rt, "ops") {
			switch op := rapid.IntRange(0, 4).Draw(rt, fmt.Sprintf("op%d", i)); op {
			case 0: // a rank's stream changes state
				r := rapid.IntRange(0, 1).Draw(rt, "rank")
				st := rapid.SampledFrom([]vllmzmq.State{vllmzmq.StateSyncing, vllmzmq.StateExact, vllmzmq.StateDegraded}).Draw(rt, "state")
				rs := s.rank("w2", r)
				rs.StateChanged(vllmzmq.StateChange{Worker: rs.worker, State: st, Reason: "x"})
				ranks[r] = st
			case 1: // a health probe, sent some seconds ago
				outcome := rapid.SampledFrom([]string{"ok", "refused", "timeout"}).Draw(rt, "outcome")
				sent := s.now.Add(-time.Duration(rapid.IntRange(0, 5).Draw(rt, "age")) * time.Second)
				var err error
				switch outcome {
				case "refused":
					err = errors.New("refused")
				case "timeout":
					err = fmt.Errorf("GET /health: %w", context.DeadlineExceeded)
				}
				s.ws.probed(id, err, limit, sent)
				switch {
				case outcome == "ok":
					failures, down = 0, false
				case outcome == "timeout" && !lastEvent.Before(sent):
					// inconclusive: the worker published while the probe waited
				default:
					if failures++; failures >= limit {
						down = true
					}
				}
			case 2: // time passes, then the watchdog looks
				s.now = s.now.Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "secs")) * time.Second)
				active := rapid.IntRange(0, 2).Draw(rt, "active")
				s.ws.checkSilence(map[kvevent.WorkerID]int{id: active}, s.now)
				if !down {
					if active == 0 {
						busySince = time.Time{}
					} else {
						if busySince.IsZero() {
							busySince = s.now
						}
						since := lastEvent
						if busySince.After(since) {
							since = busySince
						}
						if s.now.Sub(since) >= window {
							silent = true
						}
					}
				}
			case 3: // a batch of events arrives on a rank
				rs := s.rank("w2", rapid.IntRange(0, 1).Draw(rt, "rank"))
				rs.Apply(1, []kvevent.Event{{Worker: rs.worker, Kind: kvevent.Cleared}})
				lastEvent = s.now
				if silent {
					silent, busySince = false, time.Time{}
				}
			case 4: // time passes without a check
				s.now = s.now.Add(time.Duration(rapid.IntRange(0, 90).Draw(rt, "idle")) * time.Second)
			}
			want := fleet.StateExact
			switch {
			case down:
				want = fleet.StateDown
			case ranks[0] != vllmzmq.StateExact || ranks[1] != vllmzmq.StateExact || silent:
				want = fleet.StateDegraded
			}
			got := s.status("w2")
			if got.State != want {
				rt.Fatalf("after op %d: state %s (%q), model says %s (ranks %v, down %v, silent %v)",
					i, got.State, got.Reason, want, ranks, down, silent)
			}
			if (got.State == fleet.StateExact) != (got.Reason == "") {
				rt.Fatalf("state %s with reason %q", got.State, got.Reason)
			}
			if s.fr.down[id] != down {
				rt.Fatalf("router down flag %v, model %v", s.fr.down[id], down)
			}
		}
	})
}
