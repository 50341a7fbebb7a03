package natsevents_test

import (
	"maps"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/nats-io/nats.go"
)

// The NATS server goes away mid-traffic and comes back on the same port:
// publishers lose what they publish meanwhile (no reconnect buffer), the
// router resubscribes and, from its reconnect hook, asks every worker for
// what it missed.
func TestNATSServerRestart(t *testing.T) {
	srv := natstest.StartServer(t, -1, false)
	url := srv.ClientURL()
	f := startFleetOpts(t, url, 2, server.Faults{}, nats.ReconnectBufSize(-1))
	v := newView()
	var c atomic.Pointer[natsevents.Consumer]
	var reconnects atomic.Int64
	nc := natstest.Connect(t, url, nats.ReconnectHandler(func(*nats.Conn) {
		reconnects.Add(1)
		if p := c.Load(); p != nil {
			p.Reconnected()
		}
	}))
	c.Store(newConsumer(t, nc, v, nil, nil))
	f.announce(c.Load())
	rng := rand.New(rand.NewPCG(3, 4))
	f.traffic(t, rng, 30)
	waitConverged(t, f, v, c.Load(), 10*time.Second)

	p := srv.Addr().(*net.TCPAddr).Port
	srv.Shutdown()
	srv.WaitForShutdown()
	f.traffic(t, rng, 30) // these events are lost
	natstest.StartServer(t, p, false)
	poll.Until(t, 10*time.Second, func() bool { return reconnects.Load() > 0 }, "router reconnect")
	waitConverged(t, f, v, c.Load(), 10*time.Second)
	f.traffic(t, rng, 20)
	waitConverged(t, f, v, c.Load(), 10*time.Second)
}

// A publisher (agent) restarts: a new process with a new publisher id and a
// fresh local indexer whose ids count from 0 again. With the envelope the
// new publisher id reveals it; bare, ids starting over do. Either way the
// router clears the rank and replays the new indexer's dump.
func TestPublisherRestart(t *testing.T) {
	for _, bare := range []bool{false, true} {
		t.Run(map[bool]string{false: "envelope", true: "bare"}[bare], func(t *testing.T) {
			srv := natstest.StartServer(t, -1, false)
			w := kvevent.WorkerRank{ID: 9, Rank: 0}
			cfg := natsevents.DefaultPublisherConfig()
			cfg.Bare = bare
			pubConn := natstest.Connect(t, srv.ClientURL())
			start := func() (*localindex.Index, *natsevents.Publisher) {
				x := localindex.New(w, 16)
				p, err := natsevents.NewPublisher(cfg, pubConn)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Serve(w, x); err != nil {
					t.Fatal(err)
				}
				return x, p
			}
			x, p := start()
			v := newView()
			c := newConsumer(t, natstest.Connect(t, srv.ClientURL()), v, nil, nil)
			c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
				ID: w.ID, Name: "a", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsNATS}}}})
			rng := rand.New(rand.NewPCG(5, 6))
			emit := func(x *localindex.Index, p *natsevents.Publisher, n int) {
				for range n {
					var ev kvevent.Event
					if rng.IntN(3) == 0 {
						ev = kvevent.Event{Kind: kvevent.Removed, Removed: []uint64{uint64(rng.IntN(40))}}
					} else {
						h := uint64(rng.IntN(40))
						ev = kvevent.Event{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h * 3}}}
					}
					if err := p.Publish(x.Apply([]kvevent.Event{ev})); err != nil {
						t.Fatal(err)
					}
				}
			}
			emit(x, p, 50)
			wait := func(x *localindex.Index) {
				poll.Until(t, 10*time.Second, func() bool { return maps.Equal(v.Get(w), truth(x)) }, "router view equals the publisher's")
			}
			wait(x)
			p.Close()
			x2, p2 := start()
			defer p2.Close()
			emit(x2, p2, 30)
			wait(x2)
			if len(truth(x2)) == 0 {
				t.Fatal("nothing cached: the removal check below would be vacuous")
			}
			// Deregistration / heartbeat expiry: every block goes.
			c.Notify(fleet.Notification{Kind: fleet.Removed, Worker: fleet.Worker{Record: fleet.WorkerRecord{ID: w.ID}}})
			if got := v.Get(w); len(got) != 0 {
				t.Fatalf("removed worker still holds %d blocks", len(got))
			}
		})
	}
}
