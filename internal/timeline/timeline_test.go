package timeline

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestLatencyQuantilesWithinResolution(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 100, 5000} {
		var l Latency
		var vals []time.Duration
		for range n {
			// Log-uniform from 100 µs to 100 s.
			d := time.Duration(float64(100*time.Microsecond) * math.Pow(1e6, rng.Float64()))
			l.Observe(d)
			vals = append(vals, d)
		}
		slices.Sort(vals)
		for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 1} {
			rank := max(int(math.Ceil(q*float64(n))), 1)
			want := vals[rank-1]
			got := l.Quantile(q)
			if rel := math.Abs(float64(got)-float64(want)) / float64(want); rel > latencyRelErr+1e-9 {
				t.Errorf("n=%d q=%v: got %v, want %v (rel err %.3f > %.3f)", n, q, got, want, rel, latencyRelErr)
			}
		}
		if l.Count() != uint64(n) {
			t.Errorf("Count = %d, want %d", l.Count(), n)
		}
	}
	var empty Latency
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram has a median")
	}
	var edge Latency
	edge.Observe(-time.Second)
	edge.Observe(1000 * time.Hour)
	if got := edge.Quantile(0); got != latencyMin {
		t.Errorf("below-range value reads %v, want %v", got, latencyMin)
	}
	if got := edge.Quantile(1); got < 40*time.Minute {
		t.Errorf("above-range value reads %v", got)
	}
}

func TestTimelineSlots(t *testing.T) {
	t0 := time.Unix(1_000_000_000, 0) // a slot boundary for 5 s steps
	tl := New(5*time.Second, 30*time.Second, 8)
	if tl.Len() != 6 || tl.Step() != 5*time.Second {
		t.Fatalf("Len %d Step %v", tl.Len(), tl.Step())
	}
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	// Slot 0: two requests on worker 7 (one an error), a TTFT, a reading.
	tl.Read(at(0.5), []Gauge{{ID: 7, Name: "w7", InFlight: 2, UsedBlocks: 10, CapacityBlocks: 100}})
	tl.Finished(at(1), Request{Worker: 7, Served: true, HasUsage: true, PromptTokens: 100, PredictedTokens: 64, ActualTokens: 48})
	tl.Finished(at(2), Request{Error: true})
	tl.FirstToken(at(2), 30*time.Millisecond)
	tl.Read(at(4), []Gauge{{ID: 7, Name: "w7", InFlight: 1, UsedBlocks: 12, CapacityBlocks: 100}, {ID: 3, Name: "w3"}})

	h := tl.History(at(4.5))
	if len(h) != 1 {
		t.Fatalf("history %+v", h)
	}
	p := h[0]
	if !p.Start.Equal(t0) || p.Elapsed != 4500*time.Millisecond {
		t.Errorf("open slot start %v elapsed %v", p.Start, p.Elapsed)
	}
	if p.Fleet.Requests != 2 || p.Fleet.Errors != 1 || p.Fleet.TTFTs != 1 {
		t.Errorf("fleet %+v", p.Fleet)
	}
	if rel := math.Abs(float64(p.Fleet.TTFTP50-30*time.Millisecond)) / float64(30*time.Millisecond); rel > latencyRelErr {
		t.Errorf("p50 %v", p.Fleet.TTFTP50)
	}
	if len(p.Workers) != 2 || p.Workers[0].ID != 3 || p.Workers[1].ID != 7 {
		t.Fatalf("workers not by id: %+v", p.Workers)
	}
	w := p.Workers[1]
	if !w.HasGauge || w.InFlight != 1 || w.UsedBlocks != 12 || w.Requests != 1 || w.PromptTokens != 100 ||
		w.PredictedTokens != 64 || w.ActualTokens != 48 {
		t.Errorf("worker 7 %+v: want the last reading and the served request", w)
	}

	// Slot 1 empty, slot 2 one request: slot 0 closes, slot 1 is absent.
	tl.Finished(at(11), Request{})
	h = tl.History(at(12))
	if len(h) != 2 || !h[0].Start.Equal(t0) || !h[1].Start.Equal(at(10)) || h[0].Elapsed != 5*time.Second {
		t.Fatalf("history %+v", h)
	}
	if h[0].Fleet.Requests != 2 || h[1].Fleet.Requests != 1 || h[1].Fleet.TTFTs != 0 || len(h[1].Workers) != 0 {
		t.Errorf("slots mixed up: %+v", h)
	}
	// The clock going back is dropped, not counted in the wrong slot.
	tl.Finished(at(3), Request{})
	if h = tl.History(at(12)); h[0].Fleet.Requests != 2 || h[1].Fleet.Requests != 1 {
		t.Errorf("a request from the past was counted: %+v", h)
	}
	// Past the span, slot 0 falls out; the window is the span's six slots.
	h = tl.History(at(31))
	if len(h) != 1 || !h[0].Start.Equal(at(10)) {
		t.Fatalf("history at 31 s: %+v", h)
	}
	if h = tl.History(at(100)); len(h) != 0 {
		t.Fatalf("history long after: %+v", h)
	}
}

func TestTimelineBoundsWorkers(t *testing.T) {
	t0 := time.Unix(1_000_000_000, 0)
	tl := New(time.Second, 10*time.Second, 3)
	var gs []Gauge
	for id := range uint64(10) {
		gs = append(gs, Gauge{ID: id})
	}
	for i := range 100 {
		now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		tl.Read(now, gs)
		tl.Finished(now, Request{Worker: uint64(20 + i), Served: true, HasUsage: true})
	}
	h := tl.History(t0.Add(9950 * time.Millisecond))
	if len(h) != 10 {
		t.Fatalf("%d slots, want 10", len(h))
	}
	for _, p := range h {
		if len(p.Workers) != 3 {
			t.Fatalf("slot %v has %d workers, want the cap 3", p.Start, len(p.Workers))
		}
		if p.Fleet.Requests != 10 {
			t.Fatalf("slot %v counts %d requests, want 10", p.Start, p.Fleet.Requests)
		}
	}
}
