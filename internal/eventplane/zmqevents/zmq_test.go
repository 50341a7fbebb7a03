package zmqevents_test

import (
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/kveventtest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// key and view are the shared naive model of held blocks.
type (
	key  = kveventtest.Key
	view = kveventtest.View
)

func truth(x *localindex.Index) map[key]uint64 {
	_, evs := x.Dump()
	var v view
	for _, ev := range evs {
		ev.Worker = kvevent.WorkerRank{}
		_ = v.ApplyEvent(ev)
	}
	return v.Get(kvevent.WorkerRank{})
}

// Two worker processes with two dp ranks each publish over ZMQ with 20 %
// of events lost and 10 % duplicated. The router's view converges to every
// rank's local indexer through gap recovery over the ROUTER sockets.
func TestZMQEventPlane(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	type proc struct {
		p  *zmqevents.Publisher
		xs []*localindex.Index
		id kvevent.WorkerID
	}
	var procs []*proc
	for i := range 2 {
		p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pr := &proc{p: p, id: kvevent.WorkerID(50 + i)}
		for r := range 2 {
			w := kvevent.WorkerRank{ID: pr.id, Rank: kvevent.DPRank(r)}
			x := localindex.New(w, 32)
			_ = p.Serve(w, x)
			pr.xs = append(pr.xs, x)
		}
		procs = append(procs, pr)
	}
	v := &view{}
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry = 20 * time.Millisecond
	cfg.Recovery.RetryWait = 50 * time.Millisecond
	cfg.Recovery.QueryTimeout = 2 * time.Second
	c, err := zmqevents.NewConsumer(cfg, v, nil, nil, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, pr := range procs {
		c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
			ID: pr.id, Name: "p", DPSize: 2, Events: fleet.EventSource{Kind: fleet.EventsZMQ,
				Endpoint: pr.p.Endpoint(), Replay: pr.p.QueryEndpoint()}}}})
	}
	rng := rand.New(rand.NewPCG(9, 10))
	emit := func(n int) {
		for range n {
			pr := procs[rng.IntN(len(procs))]
			r := rng.IntN(2)
			var ev kvevent.Event
			if rng.IntN(3) == 0 {
				ev = kvevent.Event{Kind: kvevent.Removed, Removed: []uint64{uint64(rng.IntN(30))}}
			} else {
				h := uint64(rng.IntN(30))
				ev = kvevent.Event{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}
			}
			evs := pr.xs[r].Apply([]kvevent.Event{ev})
			switch d := rng.IntN(10); {
			case d < 2: // lost
			case d < 3:
				_ = pr.p.Publish(evs)
				_ = pr.p.Publish(evs)
			default:
				_ = pr.p.Publish(evs)
			}
		}
	}
	converged := func() bool {
		for _, pr := range procs {
			for r, x := range pr.xs {
				if !maps.Equal(v.Get(kvevent.WorkerRank{ID: pr.id, Rank: kvevent.DPRank(r)}), truth(x)) {
					return false
				}
			}
		}
		return true
	}
	time.Sleep(100 * time.Millisecond) // let the SUB sockets connect (slow joiner)
	emit(200)
	c.Resync() // the last events may have been lost with nothing after them
	poll.Until(t, 10*time.Second, converged, "router view equals every rank's local indexer")
}
