package zmqevents_test

import (
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// The frame bomb of issue 21 against both ends of the ZMQ event plane: a
// peer announcing a 1 GiB frame in the handshake is dropped at the header
// (unguarded, zmq4 allocated the claim and waited for the body), the
// consumer counts it, and an honest worker's events still reach the index.
func TestEventPlaneSurvivesFrameBombs(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w := kvevent.Worker{ID: 5}
	x := localindex.New(w, 32)
	_ = p.Serve(w, x)

	// The worker's sockets, bombed by a peer that connects to them.
	before := zmtptest.Allocated()
	zmtptest.BombDial(t, strings.TrimPrefix(p.Endpoint(), "tcp://"), zmtptest.BombSize)
	zmtptest.BombDial(t, strings.TrimPrefix(p.QueryEndpoint(), "tcp://"), zmtptest.BombSize)

	// The router's sockets, dialling a worker record whose endpoints bomb.
	subBomb := zmtptest.NewListener(t, zmtptest.BombSize)
	defer subBomb.Close()
	queryBomb := zmtptest.NewListener(t, zmtptest.BombSize)
	defer queryBomb.Close()
	reg := prometheus.NewRegistry()
	v := &view{}
	cfg := zmqevents.DefaultConsumerConfig()
	cfg.DialRetry = 20 * time.Millisecond
	cfg.Recovery.RetryWait = 20 * time.Millisecond
	c, err := zmqevents.NewConsumer(cfg, v, nil, reg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := func(id kvevent.WorkerID, events, replay string) {
		c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
			ID: id, Name: "w", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: events, Replay: replay}}}})
	}
	add(6, subBomb.Endpoint(), "")             // SUB handshake bombed
	add(7, p.Endpoint(), queryBomb.Endpoint()) // recovery query bombed
	add(w.ID, p.Endpoint(), p.QueryEndpoint()) // honest
	for name, l := range map[string]*zmtptest.Listener{"SUB": subBomb, "query DEALER": queryBomb} {
		select {
		case <-l.Dropped:
		case <-l.Late:
			t.Fatalf("the consumer's %s kept a bombed connection open", name)
		case <-time.After(15 * time.Second):
			t.Fatalf("the consumer's %s never dialled", name)
		}
	}
	if grown := zmtptest.Allocated() - before; grown > zmtptest.BombSize/2 {
		t.Fatalf("%d MiB allocated while bombs announcing %d MiB were played", grown>>20, zmtptest.BombSize>>20)
	}
	waitFor(t, 5*time.Second, func() bool {
		return counterValue(t, reg, "kvrouter_eventplane_frames_refused_total") >= 2
	}, "both refusals counted")

	time.Sleep(100 * time.Millisecond) // let the SUB socket connect (slow joiner)
	for h := range uint64(3) {
		if err := p.Publish(x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: []kvevent.Block{{EngineHash: h, LocalHash: h + 7}}}})); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, func() bool { return len(truth(x)) == 3 && maps.Equal(v.Get(w), truth(x)) },
		"the honest worker's events applied")
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			total := 0.0
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
			return total
		}
	}
	return 0
}
