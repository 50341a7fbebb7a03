package recovery

import (
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestLateAddReportsState: a worker whose live events arrive before it is
// added (a router that subscribed before its registry watch delivered the
// worker) is followed at once; the Add that comes later reports its state
// again. It used to report nothing, so the service, which ignored the
// first report for a worker it did not know yet, waited for the worker's
// initial sync for good (found by internal/chaos).
func TestLateAddReportsState(t *testing.T) {
	x := localindex.New(testWorker, 8)
	q := &fakeQuerier{x: x}
	v := &lockedView{n: naive{}}
	var mu sync.Mutex
	var added bool
	var afterAdd []fleet.State
	cfg := DefaultConfig()
	cfg.RetryWait = 10 * time.Millisecond
	cfg.AcceptUnknown = true
	tr, err := NewTracker(cfg, q, v, func(_ kvevent.WorkerID, s fleet.State, _ string) {
		mu.Lock()
		if added {
			afterAdd = append(afterAdd, s)
		}
		mu.Unlock()
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ev := x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 10}}}})[0]
	tr.Live(ev, 0)
	poll.Until(t, 5*time.Second, func() bool { _, ok := v.get()[blockKey{0, 1}]; return ok }, "unknown worker followed from its live event")
	poll.Until(t, 5*time.Second, func() bool {
		tr.stateMu.Lock()
		defer tr.stateMu.Unlock()
		return tr.agg[testWorker.ID] == fleet.StateExact
	}, "EXACT before Add")
	mu.Lock()
	added = true
	mu.Unlock()
	tr.Add(testWorker)
	mu.Lock()
	defer mu.Unlock()
	if len(afterAdd) != 1 || afterAdd[0] != fleet.StateExact {
		t.Fatalf("states reported after the late Add: %v, want [EXACT]", afterAdd)
	}
}
