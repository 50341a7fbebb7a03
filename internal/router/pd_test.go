package router

import (
	"errors"
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// TestPhases: workers 1 and 2 prefill, 3 and 4 decode. Prefill hops go to
// the prefill worker holding the prompt; decode hops go to the decode
// worker with less decode load, book no prefill and carry the prompt
// blocks; whole requests never go to a prefill worker.
func TestPhases(t *testing.T) {
	cfg := DefaultConfig()
	r, err := New(cfg, serialIndex(t), fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, role := range map[kvevent.WorkerID]Role{1: RolePrefill, 2: RolePrefill, 3: RoleDecode, 4: RoleDecode} {
		if err := r.AddWorker(WorkerInfo{ID: id, BlockSize: cfg.BlockSize, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	toks := tokens(1, 0, 1024, 1024)
	// Worker 2 holds the prompt.
	ev, _ := storeEvent(kvevent.WorkerRank{ID: 2}, toks, cfg.BlockSize, 0)
	if err := r.ApplyEvent(ev); err != nil {
		t.Fatal(err)
	}
	p, err := r.Route(Request{ID: "p", Tokens: toks, Phase: PhasePrefill})
	if err != nil || p.Worker.ID != 2 || p.Phase != PhasePrefill {
		t.Fatalf("prefill hop: %v on %v (phase %v), want worker 2", err, p.Worker, p.Phase)
	}
	// Load decode worker 3 with a long request: the next decode hop goes
	// to 4.
	other := tokens(2, 0, 0, 4096)
	if _, err := r.Route(Request{ID: "busy", Tokens: other, PinnedWorker: 3, HasPinned: true, Phase: PhaseDecode}); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(Request{ID: "d", Tokens: toks, Phase: PhaseDecode})
	if err != nil || d.Worker.ID != 4 {
		t.Fatalf("decode hop: %v on %v, want worker 4", err, d.Worker)
	}
	if d.PrefillTokens != 0 {
		t.Errorf("decode hop booked %d prefill tokens, want 0", d.PrefillTokens)
	}
	var l4 Load
	for _, l := range r.Loads() {
		if l.Worker.ID == 4 {
			l4 = l
		}
	}
	if l4.ActiveBlocks != float64(len(toks)/cfg.BlockSize) || l4.ActivePrefillTokens != 0 {
		t.Errorf("decode worker load %+v, want %d active blocks and no prefill", l4, len(toks)/cfg.BlockSize)
	}
	for range 20 {
		w, err := r.Plan(Request{Tokens: tokens(3, 0, 0, 256)})
		if err != nil || (w.Worker.ID != 3 && w.Worker.ID != 4) {
			t.Fatalf("whole request: %v on %v, want a decode worker", err, w.Worker)
		}
	}
	for _, id := range []string{"p", "busy", "d"} {
		r.Free(id)
	}
	assertIdle(t, r)

	// Without prefill workers the prefill phase is refused.
	r.RemoveWorker(1)
	r.RemoveWorker(2)
	if _, err := r.Plan(Request{Tokens: toks, Phase: PhasePrefill}); !errors.Is(err, ErrNoCandidates) {
		t.Errorf("prefill hop without prefill workers: %v, want ErrNoCandidates", err)
	}
	if r.HasRole(RolePrefill) || !r.HasRole(RoleDecode) {
		t.Error("HasRole wrong after removing the prefill workers")
	}
}

// TestPhaseLifecycle: both hops' bookings reach replica sync as ordinary
// lifecycle events; the decode hop's carries the prompt blocks and no
// prefill, and a replica applying them sees the same loads.
func TestPhaseLifecycle(t *testing.T) {
	cfg := DefaultConfig()
	var evs []LifecycleEvent
	a, err := New(cfg, serialIndex(t), fixedClock, func(ev LifecycleEvent) { evs = append(evs, ev) })
	if err != nil {
		t.Fatal(err)
	}
	cfgB := cfg
	cfgB.RouterID = cfg.RouterID + 1
	b, err := New(cfgB, serialIndex(t), fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Router{a, b} {
		for id, role := range map[kvevent.WorkerID]Role{1: RolePrefill, 2: RoleDecode} {
			if err := r.AddWorker(WorkerInfo{ID: id, BlockSize: cfg.BlockSize, Role: role}); err != nil {
				t.Fatal(err)
			}
		}
	}
	toks := tokens(4, 0, 0, 512)
	if _, err := a.Route(Request{ID: "p", Tokens: toks, Phase: PhasePrefill, ExpectedOutputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Route(Request{ID: "d", Tokens: toks, Phase: PhaseDecode}); err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Worker.ID != 1 || evs[0].PrefillTokens != 512 || evs[1].Worker.ID != 2 || evs[1].PrefillTokens != 0 ||
		len(evs[1].BlockHashes) != 512/cfg.BlockSize {
		t.Fatalf("lifecycle events %+v; want the prefill hop on 1 with 512 prefill tokens, the decode hop on 2 with the blocks and none", evs)
	}
	for _, ev := range evs {
		if !b.ApplyRemote(ev) {
			t.Fatalf("replica refused %+v", ev)
		}
	}
	if la, lb := a.Loads(), b.Loads(); len(la) != 2 || la[0] != lb[0] || la[1] != lb[1] {
		t.Errorf("loads differ: %+v vs %+v", la, lb)
	}
}

// TestKVTimeHops: under kv-time the router tells the policy which hop it
// routes. A decode hop of a prompt worker 3 holds only half of is priced
// with the transfer of the other half and no prefill of it; a prefill hop
// carries no decode term; a whole request no transfer.
func TestKVTimeHops(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = "kv-time"
	r, err := New(cfg, serialIndex(t), fixedClock, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, role := range map[kvevent.WorkerID]Role{1: RolePrefill, 3: RoleDecode} {
		if err := r.AddWorker(WorkerInfo{ID: id, BlockSize: cfg.BlockSize, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	toks := tokens(1, 0, 2048, 2048)
	ev, _ := storeEvent(kvevent.WorkerRank{ID: 3}, toks[:1024], cfg.BlockSize, 0)
	if err := r.ApplyEvent(ev); err != nil {
		t.Fatal(err)
	}
	d, err := r.Plan(Request{ID: "d", Tokens: toks, Phase: PhaseDecode})
	if err != nil {
		t.Fatal(err)
	}
	p := d.ChosenRow().Prediction
	kt := cfg.KVTime
	want := timemodel.TransferSeconds(1024, kt.KVBytesPerToken, kt.TransferBandwidth)
	if d.Worker.ID != 3 || !(p.Transfer > 0) || math.Abs(p.Transfer-want) > 1e-12 || p.Load != 0 {
		t.Fatalf("decode hop on %v: %+v, want the transfer of 1,024 uncached tokens (%v s)", d.Worker, p, want)
	}
	d, err = r.Plan(Request{ID: "p", Tokens: toks, Phase: PhasePrefill})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.ChosenRow().Prediction; d.Worker.ID != 1 || p.Transfer != 0 || p.Decode != 0 || p.KVPressure != 0 || p.Total != p.TTFT || !(p.Prefill > 0) {
		t.Fatalf("prefill hop on %v: %+v, want a prefill and nothing else", d.Worker, p)
	}
	d, err = r.Plan(Request{ID: "w", Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if p := d.ChosenRow().Prediction; d.Worker.ID != 3 || p.Transfer != 0 || !(p.Prefill > 0) {
		t.Fatalf("whole request on %v: %+v, want a prefill and no transfer", d.Worker, p)
	}
}
