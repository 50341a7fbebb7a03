package router

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// A plan leaves no trace: round-robin keeps its rotation (workers 1, 2,
// 3, 1, 2, 3 whatever is planned in between), and each plan names the
// worker the next Route takes.
func TestPlanKeepsRoundRobinRotation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = scheduler.PolicyRoundRobin
	r := newRouter(t, cfg, serialIndex(t), 3)
	want := []kvevent.WorkerID{1, 2, 3, 1, 2, 3}
	for i, w := range want {
		for j := range 3 {
			p, err := r.Plan(Request{Tokens: tokens(1, 100*i+j, 0, 64)})
			if err != nil {
				t.Fatal(err)
			}
			if p.Worker.ID != w {
				t.Fatalf("plan %d before route %d: worker %d, want %d (the next in the rotation)", j, i, p.Worker.ID, w)
			}
		}
		d, err := r.Route(Request{ID: fmt.Sprint(i), Tokens: tokens(1, i, 0, 64)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Worker.ID != w {
			t.Fatalf("route %d: worker %d, want %d", i, d.Worker.ID, w)
		}
	}
}

// Plans draw from a copy of the router's source: a random-policy router
// that plans between its routes routes exactly as a twin with the same
// seed that never plans.
func TestPlanKeepsRandomDraws(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = scheduler.PolicyRandom
	cfg.Seed = 7
	planning, plain := newRouter(t, cfg, serialIndex(t), 8), newRouter(t, cfg, serialIndex(t), 8)
	distinct := map[kvevent.WorkerID]bool{}
	for i := range 40 {
		toks := tokens(2, i, 0, 64)
		for range 2 {
			if _, err := planning.Plan(Request{Tokens: toks}); err != nil {
				t.Fatal(err)
			}
		}
		a, err := planning.Route(Request{ID: fmt.Sprint(i), Tokens: toks})
		if err != nil {
			t.Fatal(err)
		}
		b, err := plain.Route(Request{ID: fmt.Sprint(i), Tokens: toks})
		if err != nil {
			t.Fatal(err)
		}
		if a.Worker != b.Worker {
			t.Fatalf("route %d: %v after plans, %v without", i, a.Worker, b.Worker)
		}
		distinct[a.Worker.ID] = true
	}
	if len(distinct) < 4 {
		t.Fatalf("random policy used only %d of 8 workers: the comparison shows nothing", len(distinct))
	}
}

// A failed plan refuses nothing: only failed Routes count as rejected.
func TestFailedPlanIsNotRejected(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 2)
	req := Request{Tokens: tokens(3, 0, 0, 64), AllowedWorkers: []kvevent.WorkerID{9}}
	if _, err := r.Plan(req); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("plan: %v", err)
	}
	if st := r.Stats(); st.Rejected != 0 {
		t.Fatalf("rejected after a failed plan: %d, want 0", st.Rejected)
	}
	req.ID = "a"
	if _, err := r.Route(req); !errors.Is(err, ErrNoCandidates) {
		t.Fatalf("route: %v", err)
	}
	if st := r.Stats(); st.Rejected != 1 {
		t.Fatalf("rejected after a failed route: %d, want 1", st.Rejected)
	}
}
