package natsevents_test

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/prometheus/client_golang/prometheus"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Mock workers drop 15 % and duplicate 15 % of their event batches live;
// one resets its cache midway (engine restart: a Cleared event). The
// router's view ends equal to every engine's cached block set, gaps having
// been recovered from the local indexers; a router joining after the
// traffic gets the same state from dumps alone.
func TestFleetConvergesUnderLossAndDuplication(t *testing.T) {
	srv := natstest.StartServer(t, -1, false)
	f := startFleet(t, srv.ClientURL(), 3, server.Faults{DropEvents: 0.15, DuplicateEvents: 0.15})
	v := newView()
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	states := map[kvevent.WorkerID]fleet.State{}
	c := newConsumer(t, natstest.Connect(t, srv.ClientURL()), v, reg, func(id kvevent.WorkerID, s fleet.State, _ string) {
		mu.Lock()
		states[id] = s
		mu.Unlock()
	})
	f.announce(c)
	rng := rand.New(rand.NewPCG(1, 2))
	f.traffic(t, rng, 60)
	f.reset(t, 1)
	f.traffic(t, rng, 60)
	waitConverged(t, f, v, c, 10*time.Second)

	if metricstest.Sum(t, reg, "kvrouter_eventplane_gaps_total") == 0 || metricstest.Sum(t, reg, "kvrouter_eventplane_duplicates_dropped_total") == 0 {
		t.Fatalf("faults not exercised: gaps %v, duplicates %v", metricstest.Sum(t, reg, "kvrouter_eventplane_gaps_total"),
			metricstest.Sum(t, reg, "kvrouter_eventplane_duplicates_dropped_total"))
	}
	poll.Until(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range f.ids {
			if states[kvevent.WorkerID(id)] != fleet.StateExact {
				return false
			}
		}
		return true
	}, "every worker EXACT")

	// A late router: full state from the local indexers.
	v2 := newView()
	c2 := newConsumer(t, natstest.Connect(t, srv.ClientURL()), v2, nil, nil)
	f.announce(c2)
	waitConverged(t, f, v2, c2, 10*time.Second)
}
