package server

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/nats-io/nats.go"
)

// The NATS sink numbers events as the local indexer does (from 0, one per
// event, dropped batches included), skips dropped batches and sends
// duplicated ones twice.
func TestNATSSinkNumbersLikeTheLocalIndexer(t *testing.T) {
	ns := natstest.StartServer(t, -1, false)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync(dynamo.Subject("dynamo", "backend"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewNATSSink(nc, natsevents.DefaultPublisherConfig(), 9, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stored := func(h uint64) mocker.Event {
		return mocker.Event{Kind: kvevent.Stored, Hashes: []uint64{h}, Tokens: []uint32{1, 2}, BlockSize: 2}
	}
	_ = s.Publish(Batch{Rank: 1, Events: []mocker.Event{stored(1), stored(2)}}, Deliver)
	_ = s.Publish(Batch{Rank: 1, Events: []mocker.Event{stored(3)}}, DropLive)
	_ = s.Publish(Batch{Rank: 1, Events: []mocker.Event{stored(4)}}, Duplicate)
	_ = s.Publish(Batch{Rank: 0, Events: []mocker.Event{stored(5)}}, Deliver)
	if err := s.Publish(Batch{Rank: 2}, Deliver); err == nil {
		t.Fatal("rank 2 of a 2-rank sink accepted")
	}
	want := []struct {
		rank kvevent.DPRank
		id   uint64
		hash uint64
	}{{1, 0, 1}, {1, 1, 2}, {1, 3, 4}, {1, 3, 4}, {0, 0, 5}}
	for i, w := range want {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		ev, env, err := dynamo.Decode(m.Data)
		if err != nil || env == nil {
			t.Fatalf("message %d: %v (envelope %v)", i, err, env)
		}
		if ev.Worker != (kvevent.WorkerRank{ID: 9, Rank: w.rank}) || ev.ID != w.id || ev.Blocks[0].EngineHash != w.hash || ev.Blocks[0].LocalHash == 0 {
			t.Fatalf("message %d: %+v, want rank %d id %d hash %d", i, ev, w.rank, w.id, w.hash)
		}
	}
	if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("unexpected extra message %q", m.Data)
	}
}
