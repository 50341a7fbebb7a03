package service

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
)

// fakeRouter records what the worker set tells the router.
type fakeRouter struct {
	mu     sync.Mutex
	events []kvevent.Event
	down   map[kvevent.WorkerID]bool
}

func (f *fakeRouter) ApplyEvent(ev kvevent.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

func (f *fakeRouter) SetDown(id kvevent.WorkerID, down bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[kvevent.WorkerID]bool{}
	}
	f.down[id] = down
	return true
}

// stateSet is a worker set over static records with a fake clock.
type stateSet struct {
	t   *testing.T
	ws  *workerSet
	fr  *fakeRouter
	now time.Time
}

func newStateSet(t *testing.T, recs ...fleet.StaticWorker) *stateSet {
	t.Helper()
	rs, err := fleet.BuildStatic(recs, 16, fleet.DefaultHashContract())
	if err != nil {
		t.Fatal(err)
	}
	s := &stateSet{t: t, fr: &fakeRouter{}, now: time.Unix(1000, 0)}
	dir, notes, err := fleet.NewDirectory(fleet.Expect{BlockSize: 16, Hash: fleet.DefaultHashContract()}, rs, nil, s.now)
	if err != nil {
		t.Fatal(err)
	}
	s.ws = newWorkerSet(dir, s.fr, func() time.Time { return s.now }, slog.New(slog.DiscardHandler), 60*time.Second)
	for _, n := range notes {
		src := sourceNone
		if n.Worker.Record.Events.Kind == fleet.EventsZMQ {
			src = sourceEngine
		}
		s.ws.add(n.Worker.Record, src)
	}
	return s
}

func (s *stateSet) status(name string) fleet.Status {
	s.t.Helper()
	for _, e := range s.ws.List() {
		if e.Name == name {
			return e.Status
		}
	}
	s.t.Fatalf("no worker %q", name)
	return fleet.Status{}
}

func (s *stateSet) expect(name string, st fleet.State, reason string) {
	s.t.Helper()
	got := s.status(name)
	if got.State != st || !strings.Contains(got.Reason, reason) {
		s.t.Fatalf("%s is %s (%q), want %s containing %q", name, got.State, got.Reason, st, reason)
	}
}

func (s *stateSet) rank(name string, i int) *rankState {
	s.t.Helper()
	for _, w := range s.ws.byID {
		if w.name == name {
			return w.ranks[i]
		}
	}
	s.t.Fatalf("no worker %q", name)
	return nil
}

var (
	zmqWorker = fleet.StaticWorker{Name: "w1", URL: "http://127.0.0.1:1", Events: "tcp://127.0.0.1:5557"}
	dpWorker  = fleet.StaticWorker{Name: "w2", URL: "http://127.0.0.1:2", Events: "tcp://127.0.0.1:6000", DPSize: 2}
	noEvents  = fleet.StaticWorker{Name: "w3", URL: "http://127.0.0.1:3"}
	bigBlocks = fleet.StaticWorker{Name: "w4", URL: "http://127.0.0.1:4", Events: "tcp://127.0.0.1:7000", BlockSize: 32}
)

// TestWorkerStates walks a worker through every state with its reasons, as
// the subscriber, the watchdog and the prober report them.
func TestWorkerStates(t *testing.T) {
	s := newStateSet(t, zmqWorker, dpWorker, noEvents, bigBlocks)
	s.expect("w1", fleet.StateDegraded, "awaiting initial event recovery")
	s.expect("w3", fleet.StateApprox, "approximate mode")
	s.expect("w4", fleet.StateRefused, "block size 32 ≠ 16")
	if ok, pending := s.ws.synced(); ok || len(pending) != 3 {
		t.Fatalf("synced %v pending %v, want 3 ranks pending", ok, pending)
	}

	r := s.rank("w1", 0)
	r.StateChanged(vllmzmq.StateChange{Worker: r.worker, State: vllmzmq.StateExact, Reason: "initial replay applied 3 batches"})
	s.expect("w1", fleet.StateExact, "")
	r.StateChanged(vllmzmq.StateChange{Worker: r.worker, State: vllmzmq.StateDegraded, Reason: "replay could not cover sequences 812–830"})
	s.expect("w1", fleet.StateDegraded, "replay could not cover sequences 812–830")
	r.StateChanged(vllmzmq.StateChange{Worker: r.worker, State: vllmzmq.StateExact, Reason: "stream contiguous again"})
	s.expect("w1", fleet.StateExact, "")

	// A dp worker is EXACT only when every rank is.
	r0, r1 := s.rank("w2", 0), s.rank("w2", 1)
	r0.StateChanged(vllmzmq.StateChange{Worker: r0.worker, State: vllmzmq.StateExact})
	s.expect("w2", fleet.StateDegraded, "dp rank 1: awaiting initial event recovery")
	r1.StateChanged(vllmzmq.StateChange{Worker: r1.worker, State: vllmzmq.StateExact})
	s.expect("w2", fleet.StateExact, "")
	if ok, pending := s.ws.synced(); !ok {
		t.Fatalf("not synced: %v", pending)
	}

	// Health: two failures in a row mark DOWN (and tell the router), one
	// success brings the worker back to what its events say.
	id := fleet.DeriveID("w1")
	s.ws.probed(id, errors.New("connection refused"), 2, s.now)
	s.expect("w1", fleet.StateExact, "")
	s.ws.probed(id, errors.New("connection refused"), 2, s.now)
	s.expect("w1", fleet.StateDown, "health check failed 2 times: connection refused")
	if !s.fr.down[id] {
		t.Fatal("router not told the worker is down")
	}
	s.ws.probed(id, nil, 2, s.now)
	s.expect("w1", fleet.StateExact, "")
	if s.fr.down[id] {
		t.Fatal("router not told the worker is back")
	}
	// The refused worker stays refused whatever is observed.
	s.ws.probed(fleet.DeriveID("w4"), errors.New("x"), 1, s.now)
	s.expect("w4", fleet.StateRefused, "block size")
}

// TestSilentWhileServing: an EXACT worker with requests running and no
// event for the silence window becomes DEGRADED with the reason; idle
// silence is not suspicious; the next event brings it back.
func TestSilentWhileServing(t *testing.T) {
	s := newStateSet(t, zmqWorker)
	r := s.rank("w1", 0)
	r.StateChanged(vllmzmq.StateChange{Worker: r.worker, State: vllmzmq.StateExact})
	id := fleet.DeriveID("w1")

	s.now = s.now.Add(10 * time.Minute) // long idle: no requests, no events
	s.ws.checkSilence(map[kvevent.WorkerID]int{}, s.now)
	s.expect("w1", fleet.StateExact, "")

	busy := map[kvevent.WorkerID]int{id: 2}
	s.ws.checkSilence(busy, s.now) // requests start now
	s.now = s.now.Add(59 * time.Second)
	s.ws.checkSilence(busy, s.now)
	s.expect("w1", fleet.StateExact, "")
	s.now = s.now.Add(time.Second)
	s.ws.checkSilence(busy, s.now)
	s.expect("w1", fleet.StateDegraded, "no events for 60 s while serving requests")

	r.Apply(7, []kvevent.Event{{Worker: r.worker, Kind: kvevent.Cleared}})
	s.expect("w1", fleet.StateExact, "")
	if len(s.fr.events) != 1 {
		t.Fatalf("router got %d events, want 1", len(s.fr.events))
	}
	// Events within the window keep it EXACT while busy.
	s.now = s.now.Add(50 * time.Second)
	r.Apply(8, []kvevent.Event{{Worker: r.worker, Kind: kvevent.Cleared}})
	s.now = s.now.Add(50 * time.Second)
	s.ws.checkSilence(busy, s.now)
	s.expect("w1", fleet.StateExact, "")
}

// TestBlockSizeRefusalDegrades: a worker whose events carry another block
// size than it declared is DEGRADED with the reason while they keep
// coming, and EXACT again once a batch stores blocks without a refusal.
func TestBlockSizeRefusalDegrades(t *testing.T) {
	s := newStateSet(t, zmqWorker)
	r := s.rank("w1", 0)
	r.StateChanged(vllmzmq.StateChange{Worker: r.worker, State: vllmzmq.StateExact})
	s.expect("w1", fleet.StateExact, "")
	stored := []kvevent.Event{{Worker: r.worker, Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: 1, LocalHash: 2}}}}

	r.Refused(7, []vllm.Refusal{{Reason: vllm.ReasonBlockSize, Detail: "block size 32 ≠ 16"}})
	r.Apply(7, nil)
	s.expect("w1", fleet.StateDegraded, "events carry block size 32 ≠ 16")
	// Other refusals say nothing about the block size.
	r.Refused(8, []vllm.Refusal{{Reason: vllm.ReasonTokenCount, Detail: "x"}})
	r.Apply(8, []kvevent.Event{{Worker: r.worker, Kind: kvevent.Removed, Blocks: stored[0].Blocks}})
	s.expect("w1", fleet.StateDegraded, "events carry block size 32 ≠ 16")
	// A batch mixing refused and accepted stores keeps it DEGRADED.
	r.Refused(9, []vllm.Refusal{{Reason: vllm.ReasonBlockSize, Detail: "block size 32 ≠ 16"}})
	r.Apply(9, stored)
	s.expect("w1", fleet.StateDegraded, "events carry block size 32 ≠ 16")
	r.Apply(10, stored)
	s.expect("w1", fleet.StateExact, "")
}
