package durable_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func canonical(evs []kvevent.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out = append(out, fmt.Sprintf("%v t%d e%d l%d p%v:%d", ev.Worker, ev.Tier, b.EngineHash, b.LocalHash, ev.HasParent, ev.Parent))
		}
	}
	slices.Sort(out)
	return out
}

func newIndex(t *testing.T) *liveindex.Index {
	idx, err := liveindex.New(liveindex.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(idx.Close)
	return idx
}

// newRouter is a router core over idx: what the consumer hands its events
// to, as the service does.
func newRouter(t *testing.T, idx *liveindex.Index) *router.Router {
	r, err := router.New(router.DefaultConfig(), idx, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Two routers consume the stream; one stops, events keep coming and the
// other snapshots and purges; the stopped one restarts from the snapshot
// plus the stream and ends with the same index as the one that never
// stopped, which equals an index fed every event directly. Then a router
// started with ResetStates purges everything and starts empty.
func TestRouterRestartInDurableMode(t *testing.T) {
	ns := natstest.StartServer(t, -1, true)
	nc := natstest.Connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := durable.EnsureStream(ctx, js, dynamo.DefaultNamespace, dynamo.DefaultComponent, time.Hour, 1); err != nil {
		t.Fatal(err)
	}

	// Three workers publishing with core NATS (captured by the stream).
	pub, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), nc)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var xs []*localindex.Index
	for i := range 3 {
		xs = append(xs, localindex.New(kvevent.Worker{ID: kvevent.WorkerID(i + 1)}, 0))
	}
	rng := rand.New(rand.NewPCG(11, 12))
	heads := make([]uint64, len(xs))
	emit := func(n int) {
		for range n {
			k := rng.IntN(len(xs))
			var ev kvevent.Event
			if rng.IntN(4) == 0 && heads[k] > 0 {
				ev = kvevent.Event{Kind: kvevent.Removed, Removed: []uint64{heads[k]}}
				heads[k]--
			} else {
				h := uint64(k*1000) + heads[k] + 1
				ev = kvevent.Event{Kind: kvevent.Stored, HasParent: heads[k] > 0, Parent: h - 1,
					Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h * 31}}}
				heads[k]++
			}
			evs := xs[k].Apply([]kvevent.Event{ev})
			for i := range evs {
				e := evs[i]
				_ = ref.Apply(&e)
			}
			if err := pub.Publish(evs); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := func(id string, reset bool) (*durable.Consumer, *liveindex.Index) {
		cfg := durable.DefaultConfig()
		cfg.RouterID, cfg.SnapshotThreshold, cfg.SnapshotInterval, cfg.ResetStates = id, 50, 50*time.Millisecond, reset
		idx := newIndex(t)
		c, err := durable.New(cfg, js, newRouter(t, idx), idx, nil, nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		for i := range xs { // as the registry watch does: events of unregistered workers are dropped
			c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
				ID: kvevent.WorkerID(i + 1), Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsNATS}}}})
		}
		return c, idx
	}
	same := func(idx *liveindex.Index) func() bool {
		return func() bool {
			_ = idx.Flush()
			return cmp.Equal(canonical(idx.Dump()), canonical(ref.Dump()))
		}
	}
	a, aIdx := start("router-a", false)
	b, bIdx := start("router-b", false)
	emit(150)
	natstest.WaitFor(t, 10*time.Second, same(aIdx), "router a equals the reference")
	natstest.WaitFor(t, 10*time.Second, same(bIdx), "router b equals the reference")

	b.Close()
	emit(300)
	natstest.WaitFor(t, 10*time.Second, same(aIdx), "router a equals the reference")
	if err := a.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	emit(40)
	_, b2Idx := start("router-b", false)
	natstest.WaitFor(t, 10*time.Second, same(b2Idx), "restarted router b equals the reference")
	natstest.WaitFor(t, 10*time.Second, same(aIdx), "router a equals the reference")
	st, err := js.Stream(ctx, dynamo.StreamName(dynamo.DefaultNamespace, dynamo.DefaultComponent))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq <= 1 {
		t.Fatalf("nothing was purged: first seq %d", info.State.FirstSeq)
	}

	// Reset: stream purged, snapshot deleted, a clean start.
	_, cIdx := start("router-c", true)
	if info, _ := st.Info(ctx); info.State.Msgs != 0 {
		t.Fatalf("reset left %d messages", info.State.Msgs)
	}
	time.Sleep(100 * time.Millisecond)
	_ = cIdx.Flush()
	if n := len(cIdx.Dump()); n != 0 {
		t.Fatalf("reset router holds %d blocks", n)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := durable.Snapshot{StreamSeq: 42, Last: map[kvevent.Worker]uint64{{ID: 1, Rank: 2}: 7, {ID: 3}: 0},
		Publishers: map[kvevent.Worker]uint64{{ID: 1, Rank: 2}: 99},
		Events: []kvevent.Event{{Worker: kvevent.Worker{ID: 1, Rank: 2}, ID: 7, Kind: kvevent.Stored,
			Blocks: []kvevent.Block{{EngineHash: 5, LocalHash: 6}}}}}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := durable.DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Fatal(diff)
	}
	if _, err := durable.DecodeSnapshot(b[:len(b)-3]); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	b, _ := durable.Snapshot{StreamSeq: 1, Last: map[kvevent.Worker]uint64{{ID: 1}: 1}}.Encode()
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = durable.DecodeSnapshot(b) })
}
