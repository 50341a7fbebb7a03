package vllmzmq

import (
	"context"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestReplayCloseLeavesNoRouterReader: a subscriber that floods the replay
// ROUTER with requests and reads no reply fills zmq4's per-connection
// queue; closing the publisher left the ROUTER's reader goroutine blocked
// on it for good (the package's goleak check catches any left).
func TestReplayCloseLeavesNoRouterReader(t *testing.T) {
	cfg := DefaultPublisherConfig()
	cfg.ReplayEndpoint = "tcp://127.0.0.1:0"
	p, err := NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = p.Close()
		}
	}()
	payload := make([]byte, 4096)
	for range 500 {
		if _, err := p.PublishPayload(payload, FaultNone); err != nil {
			t.Fatal(err)
		}
	}
	d := zmtpguard.NewSock(zmtpguard.Options{}, func(ctx context.Context) zmq4.Socket { return zmq4.NewDealer(ctx) })
	if err := d.Dial(zmtpguard.Endpoint(p.ReplayEndpoint())); err != nil {
		t.Fatal(err)
	}
	defer d.Shut(true, time.Second)
	req := zmq4.NewMsgFrom([]byte{}, seqFrame(0))
	poll.Until(t, 20*time.Second, func() bool {
		for range 20 {
			if err := d.Send(req); err != nil {
				return false
			}
		}
		return zmtptest.BlockedRouterReaders() > 0
	}, "the replay ROUTER's reader blocked on a full queue")
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { return zmtptest.BlockedRouterReaders() == 0 }, "no ROUTER reader left blocked after Close")
}
