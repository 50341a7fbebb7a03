package zmqevents_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestPublisherCloseLeavesNoRouterReader: zmq4's ROUTER reads each
// connection on a goroutine that queues requests (ten at most) and, once
// the queue is full, blocks on it without watching the socket's context.
// An asker that floods the recovery socket with requests and reads no
// reply fills it; closing the publisher then left that goroutine blocked
// for good.
func TestPublisherCloseLeavesNoRouterReader(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = p.Close()
		}
	}()
	w := kvevent.WorkerRank{ID: 5}
	x := localindex.New(w, 32)
	var blocks []kvevent.Block
	for h := range uint64(4096) {
		blocks = append(blocks, kvevent.Block{EngineHash: h + 1, LocalHash: h + 1})
	}
	x.Apply([]kvevent.Event{{Kind: kvevent.Stored, Blocks: blocks}})
	_ = p.Serve(w, x)

	d := zmtpguard.NewSock(zmtpguard.Options{}, func(ctx context.Context) zmq4.Socket { return zmq4.NewDealer(ctx) })
	if err := d.Dial(zmtpguard.Endpoint(p.QueryEndpoint())); err != nil {
		t.Fatal(err)
	}
	defer d.Shut(true, time.Second)
	req := zmq4.NewMsgFrom(recovery.EncodeRequest(recovery.Request{Worker: w}))
	poll.Until(t, 20*time.Second, func() bool {
		for range 20 {
			if err := d.Send(req); err != nil {
				return false
			}
		}
		return zmtptest.BlockedRouterReaders() > 0
	}, "the publisher's ROUTER reader blocked on a full queue")
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { return zmtptest.BlockedRouterReaders() == 0 }, "no ROUTER reader left blocked after Close")
}
