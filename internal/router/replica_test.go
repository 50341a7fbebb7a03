package router

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func TestSetObserver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RouterID = 7
	r := newRouter(t, cfg, serialIndex(t), 2)
	var got []LifecycleEvent
	r.SetObserver(func(ev LifecycleEvent) { got = append(got, ev) })
	if _, err := r.Route(Request{ID: "a", Tokens: tokens(1, 1, 32, 48)}); err != nil {
		t.Fatal(err)
	}
	if !r.Booked("a") || r.Booked("zz") {
		t.Fatal("Booked wrong before Free")
	}
	r.Free("a")
	if r.Booked("a") {
		t.Fatal("Booked after Free")
	}
	r.SetObserver(nil)
	if _, err := r.Route(Request{ID: "b", Tokens: tokens(1, 2, 32, 48)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != AddRequest || got[1].Kind != Free || got[0].RouterID != 7 || got[0].RequestID != "a" {
		t.Fatalf("observed %+v", got)
	}
}

// shadowLog is a Shadows that records its calls; on its first Tick it
// books a large remote request on worker 1, as replica sync's expiry
// frees or a peer's event would change the load before the decision.
type shadowLog struct {
	t     *testing.T
	r     *Router
	calls []string
}

func (s *shadowLog) Tick(now time.Time) {
	if !now.Equal(t0) {
		s.t.Errorf("Tick at %v, want the router's clock %v", now, t0)
	}
	if len(s.calls) == 0 {
		ev := LifecycleEvent{Kind: AddRequest, RouterID: 99, RequestID: "peer", Worker: kvevent.WorkerRank{ID: 1}, PrefillTokens: 1 << 16}
		if !s.r.ApplyRemote(ev) {
			s.t.Error("remote booking refused")
		}
	}
	s.calls = append(s.calls, "tick")
}

func (s *shadowLog) BookShadows(id string, now time.Time) {
	if !s.r.Booked(id) {
		s.t.Errorf("BookShadows(%q) before the booking", id)
	}
	s.calls = append(s.calls, "shadow "+id)
}

// TestSetShadows: Route ticks the shadows before deciding (the load the
// tick adds steers the decision), books shadows only after a booking, and
// Plan and a detached router call nothing.
func TestSetShadows(t *testing.T) {
	r := newRouter(t, DefaultConfig(), serialIndex(t), 2)
	sh := &shadowLog{t: t, r: r}
	r.SetShadows(sh)
	toks := tokens(1, 1, 0, 64)
	d, err := r.Route(Request{ID: "a", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	// The decision saw the load Tick booked on worker 1, and so avoided it.
	if c := d.Candidates[0]; c.Worker.ID != 1 || c.ActivePrefillTokens != 1<<16 || d.Worker.ID != 2 {
		t.Fatalf("routed to worker %d; worker 1's row %+v, want its Tick-booked %d prefill tokens", d.Worker.ID, c, 1<<16)
	}
	if _, err := r.Route(Request{ID: "a", Tokens: toks}); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := r.Plan(Request{Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	want := []string{"tick", "shadow a", "tick"}
	if !slices.Equal(sh.calls, want) {
		t.Fatalf("calls %q, want %q", sh.calls, want)
	}
	r.SetShadows(nil)
	if _, err := r.Route(Request{ID: "b", Tokens: toks}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sh.calls, want) {
		t.Fatalf("detached: calls %q, want %q", sh.calls, want)
	}
}

// TestLocalHashes: the hashes LocalHashes gives are those Route records
// for an approximate worker (the index answers the whole prompt for
// them), salted by the LoRA name.
func TestLocalHashes(t *testing.T) {
	idx := serialIndex(t)
	r, err := New(DefaultConfig(), idx, fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddWorker(WorkerInfo{ID: 1, BlockSize: 16, Mode: Approximate}); err != nil {
		t.Fatal(err)
	}
	req := Request{ID: "a", Tokens: tokens(2, 1, 0, 100), LoRAName: "adapter"}
	if _, err := r.Route(req); err != nil {
		t.Fatal(err)
	}
	local, err := r.LocalHashes(req)
	if err != nil || len(local) != 100/16 {
		t.Fatalf("%d hashes, %v; want %d", len(local), err, 100/16)
	}
	var sc index.Scores
	idx.Query(local, &sc)
	if len(sc.List) != 1 || int(sc.List[0].Blocks) != len(local) {
		t.Fatalf("query of LocalHashes: %+v, want all %d blocks on worker 1", sc.List, len(local))
	}
	plain, err := r.LocalHashes(Request{Tokens: req.Tokens})
	if err != nil || slices.Equal(plain, local) {
		t.Fatalf("without the LoRA name: %v, same hashes %v", err, slices.Equal(plain, local))
	}
}
