package recovery

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// countingApplier counts applied events.
type countingApplier struct{ n atomic.Int64 }

func (c *countingApplier) ApplyEvent(kvevent.Event) error { c.n.Add(1); return nil }

// BenchmarkTrackerLive is the per-event cost of the router side of the
// event plane for in-order live events of one rank (duplicate and gap
// checks, the apply path): b.N events, timed until all are applied.
func BenchmarkTrackerLive(b *testing.B) {
	x := localindex.New(testWorker, 0)
	evs := make([]kvevent.Event, 4096)
	for i := range evs {
		evs[i] = x.Apply([]kvevent.Event{storedEv(uint64(i%64) + 1)})[0]
	}
	a := &countingApplier{}
	tr, err := NewTracker(DefaultConfig(), &fakeQuerier{x: localindex.New(testWorker, 0)}, a, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	tr.Add(testWorker)
	for a.n.Load() == 0 { // the empty initial dump's clear
		time.Sleep(time.Millisecond)
	}
	base := a.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ev := evs[i%len(evs)]
		ev.ID = uint64(i)
		tr.Live(ev, 0)
	}
	for a.n.Load()-base < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
	}
}
