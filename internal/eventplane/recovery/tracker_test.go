package recovery

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeQuerier answers from a local indexer, or fails while down is set.
type fakeQuerier struct {
	x    *localindex.Index
	down atomic.Bool
}

func (q *fakeQuerier) Query(_ context.Context, req Request) (Reply, error) {
	if q.down.Load() {
		return Reply{}, errors.New("no responders")
	}
	return Answer(req.Worker, q.x, req), nil
}

type lockedView struct {
	mu sync.Mutex
	n  naive
}

func (v *lockedView) ApplyEvent(ev kvevent.Event) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n.apply(ev)
	return nil
}

func (v *lockedView) get() naive {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.n)
}

// A worker whose recovery responder is down is DEGRADED (with a reason)
// while its live events are still applied; once the responder is back the
// retried dump makes it EXACT with the worker's true state. After Remove,
// its blocks are gone and late events do not bring it back.
func TestTrackerStatesAndRemoval(t *testing.T) {
	x := localindex.New(testWorker, 8)
	x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 10}}}})
	q := &fakeQuerier{x: x}
	q.down.Store(true)
	v := &lockedView{n: naive{}}
	var mu sync.Mutex
	var states []fleet.State
	var reasons []string
	cfg := DefaultConfig()
	cfg.RetryWait = 10 * time.Millisecond
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTracker(cfg, q, v, func(_ kvevent.WorkerID, s fleet.State, why string) {
		mu.Lock()
		states, reasons = append(states, s), append(reasons, why)
		mu.Unlock()
	}, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	last := func() (fleet.State, string) {
		mu.Lock()
		defer mu.Unlock()
		if len(states) == 0 {
			return 0, ""
		}
		return states[len(states)-1], reasons[len(reasons)-1]
	}
	tr.Add(testWorker)
	poll.Until(t, 5*time.Second, func() bool { s, why := last(); return s == fleet.StateDegraded && why != "" }, "DEGRADED with a reason")
	ev := x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 2, LocalHash: 20}}}})[0]
	tr.Live(ev, 0)
	poll.Until(t, 5*time.Second, func() bool { _, ok := v.get()[blockKey{0, 2}]; return ok }, "live event applied while degraded")
	if s, _ := last(); s != fleet.StateDegraded {
		t.Fatalf("state %v, want DEGRADED", s)
	}
	q.down.Store(false)
	poll.Until(t, 5*time.Second, func() bool { s, _ := last(); return s == fleet.StateExact }, "EXACT after the retried dump")
	if got, want := v.get(), truth(x); !maps.Equal(got, want) {
		t.Fatalf("view %v, worker %v", got, want)
	}
	tr.Remove(testWorker.ID)
	if n := len(v.get()); n != 0 {
		t.Fatalf("%d blocks left after Remove", n)
	}
	tr.Live(x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 3, LocalHash: 30}}}})[0], 0)
	// The late event was seen and refused before its absence is checked.
	poll.Until(t, 5*time.Second, func() bool {
		return metricstest.Sum(t, reg, "kvrouter_eventplane_events_dropped_total", "reason", DropUnknownWorker) == 1
	}, "the late event counted as dropped")
	if n := len(v.get()); n != 0 || len(tr.Workers()) != 0 {
		t.Fatalf("a removed worker came back: %d blocks, %v", n, tr.Workers())
	}
}
