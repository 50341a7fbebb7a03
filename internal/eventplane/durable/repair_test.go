package durable_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// proc is one worker process on the durable plane: its local indexer (the
// truth), a publisher with its own publisher id answering recovery
// queries, and a generator of events. A crash and restart is a new proc
// for the same worker rank (empty cache, ids from 0, new publisher id).
type proc struct {
	w    kvevent.WorkerRank
	x    *localindex.Index
	pub  *natsevents.Publisher
	rng  *rand.Rand
	head uint64 // engine hash of the chain's last stored block (0: none)
	base uint64
}

func startProc(t *testing.T, nc *nats.Conn, w kvevent.WorkerRank, seed uint64) *proc {
	t.Helper()
	pub, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), nc)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{w: w, x: localindex.New(w, 64), pub: pub, rng: rand.New(rand.NewPCG(seed, uint64(w.ID))), base: seed * 1_000_000}
	if err := pub.Serve(w, p.x); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return p
}

// step numbers one event in the local indexer and returns it: a block
// stored on the chain, or the chain's last block removed.
func (p *proc) step() kvevent.Event {
	var ev kvevent.Event
	if p.head > p.base && p.rng.IntN(4) == 0 {
		ev = kvevent.Event{Kind: kvevent.Removed, Removed: []uint64{p.head}}
		p.head--
	} else {
		if p.head < p.base {
			p.head = p.base
		}
		h := p.head + 1
		ev = kvevent.Event{Kind: kvevent.Stored, HasParent: p.head > p.base, Parent: p.head,
			Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h*31 + uint64(p.w.ID)}}}
		p.head = h
	}
	return p.x.Apply([]kvevent.Event{ev})[0]
}

// emit numbers n events; each is lost before the stream with probability
// loss (numbered, never published: what a worker whose NATS connection is
// down does) and published twice with probability dup.
func (p *proc) emit(t *testing.T, n int, loss, dup float64) (lost int) {
	t.Helper()
	for range n {
		ev := p.step()
		switch r := p.rng.Float64(); {
		case r < loss:
			lost++
			continue
		case r < loss+dup:
			if err := p.pub.Publish([]kvevent.Event{ev}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.pub.Publish([]kvevent.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	return lost
}

// blocks is a comparable rendering of held blocks: worker, tier, hashes.
func blocks(evs []kvevent.Event) []string {
	var out []string
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out = append(out, fmt.Sprintf("%v t%d e%d l%d", ev.Worker, ev.Tier, b.EngineHash, b.LocalHash))
		}
	}
	slices.Sort(out)
	return out
}

// truthOf is what the routers must hold: every live process's cache.
func truthOf(ps ...*proc) []string {
	var evs []kvevent.Event
	for _, p := range ps {
		_, d := p.x.Dump()
		evs = append(evs, d...)
	}
	return blocks(evs)
}

// durableRouter is one router's durable consumer and index.
type durableRouter struct {
	c   *durable.Consumer
	idx *liveindex.Index
}

func startRouter(t *testing.T, js jetstream.JetStream, id string, workers ...kvevent.WorkerRank) *durableRouter {
	t.Helper()
	cfg := durable.DefaultConfig()
	cfg.RouterID, cfg.SnapshotThreshold, cfg.SnapshotInterval = id, 1<<40, time.Hour
	cfg.Recovery.QueryTimeout, cfg.Recovery.RetryWait = 2*time.Second, 20*time.Millisecond
	idx := newIndex(t)
	c, err := durable.New(cfg, js, newRouter(t, idx), idx, nil, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, w := range workers {
		c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
			ID: w.ID, Name: fmt.Sprint(w.ID), DPStart: uint32(w.Rank), DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsNATS}}}})
	}
	return &durableRouter{c: c, idx: idx}
}

func (r *durableRouter) held() []string {
	_ = r.idx.Flush()
	return blocks(r.idx.Dump())
}

// waitSame polls until the router holds want, failing with a diff.
func waitSame(t *testing.T, r *durableRouter, what string, want func() []string) {
	t.Helper()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		got, w := r.held(), want()
		return slices.Equal(got, w), fmt.Sprintf("router holds %d blocks, workers %d; only router: %v; only workers: %v",
			len(got), len(w), minus(got, w), minus(w, got))
	}, what)
}

func minus(a, b []string) string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	if len(out) > 6 {
		out = append(out[:6], fmt.Sprintf("... (%d)", len(out)))
	}
	return strings.Join(out, ", ")
}

func durableSetup(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns := natstest.StartServer(t, -1, true)
	nc := natstest.Connect(t, ns.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := durable.EnsureStream(context.Background(), js, dynamo.DefaultNamespace, dynamo.DefaultComponent, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Issue 6, defect 1: events a worker numbered but never got into the
// stream (lost before the broker) and duplicated publishes. The durable
// consumer repairs each gap from the worker's local indexer, drops the
// duplicates, and ends with every worker's true block set; so does a
// router started later from the whole stream, and a router restarted from
// a snapshot asks each worker for what it lost at the tail (events no
// later event revealed).
func TestDurableRepairsLostAndDuplicatedEvents(t *testing.T) {
	nc, js := durableSetup(t)
	var ps []*proc
	var ws []kvevent.WorkerRank
	for i := range 3 {
		w := kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1), Rank: kvevent.DPRank(i % 2)}
		ps, ws = append(ps, startProc(t, nc, w, 1)), append(ws, w)
	}
	a := startRouter(t, js, "router-a", ws...)
	want := func() []string { return truthOf(ps...) }
	for _, p := range ps {
		p.emit(t, 1, 0, 0)
	}
	// Synced (initial dumps in) before the faults, so the dumps cannot
	// cover them.
	waitSame(t, a, "router a synced", want)
	lost := 0
	for range 10 {
		for _, p := range ps {
			lost += p.emit(t, 15, 0.2, 0.2)
		}
	}
	if lost == 0 {
		t.Fatal("no event lost: the test proves nothing")
	}
	for _, p := range ps {
		p.emit(t, 1, 0, 0) // a last event reveals a gap at the tail
	}
	waitSame(t, a, "router a after loss and duplicates", want)

	// A router that starts later reads the whole stream; with gaps in it.
	b := startRouter(t, js, "router-b", ws...)
	waitSame(t, b, "router b from the whole stream", want)

	// Router a restarts from a snapshot while a worker's last events never
	// reach the stream: the restored rank asks for what followed its
	// position.
	if err := a.c.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.c.Close()
	ps[0].emit(t, 5, 0, 0)
	ps[1].emit(t, 5, 1, 0) // all lost, nothing after them
	a2 := startRouter(t, js, "router-a", ws...)
	waitSame(t, a2, "router a restored from its snapshot", want)
}

// Issue 6, defect 2: a worker process restarts (new publisher id, ids from
// 0, an empty cache) and stores new blocks. The durable consumer notices
// the new publisher, clears the worker's old blocks and re-syncs from a
// dump, also when the restarted process's first events never reached the
// stream. A router that was down across the restart notices it at start
// (the recovery answer comes from another publisher) and does the same;
// the old process's events it then reads from the stream are dropped.
func TestDurableWorkerRestartClearsOldBlocks(t *testing.T) {
	nc, js := durableSetup(t)
	w1, w2 := kvevent.WorkerRank{ID: 1}, kvevent.WorkerRank{ID: 2}
	p1, p2 := startProc(t, nc, w1, 1), startProc(t, nc, w2, 1)
	a := startRouter(t, js, "router-a", w1, w2)
	b := startRouter(t, js, "router-b", w1, w2)
	p1.emit(t, 1, 0, 0)
	p2.emit(t, 1, 0, 0)
	waitSame(t, a, "router a synced", func() []string { return truthOf(p1, p2) })
	waitSame(t, b, "router b synced", func() []string { return truthOf(p1, p2) })
	p1.emit(t, 30, 0, 0)
	p2.emit(t, 30, 0, 0)
	waitSame(t, a, "router a before the restart", func() []string { return truthOf(p1, p2) })

	// Restart worker 1 with its first events lost.
	_ = p1.pub.Close()
	p1 = startProc(t, nc, w1, 2)
	p1.emit(t, 3, 1, 0)
	p1.emit(t, 4, 0, 0)
	want := func() []string { return truthOf(p1, p2) }
	waitSame(t, a, "router a after worker 1 restarted", want)
	waitSame(t, b, "router b after worker 1 restarted", want)

	// Router b is down while worker 2 emits, restarts and emits again.
	if err := b.c.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.c.Close()
	p2.emit(t, 10, 0, 0)
	_ = p2.pub.Close()
	p2 = startProc(t, nc, w2, 3)
	p2.emit(t, 5, 0, 0)
	b2 := startRouter(t, js, "router-b", w1, w2)
	waitSame(t, b2, "router b restarted across worker 2's restart", want)
	waitSame(t, a, "router a after worker 2 restarted", want)

	// The old process's id-0 event replayed late changes nothing, and the
	// new process keeps being followed.
	p2.emit(t, 3, 0, 0)
	waitSame(t, b2, "router b follows the new process", want)
	waitSame(t, a, "router a follows the new process", want)
}
