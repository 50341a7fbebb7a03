package zmtpguard

import (
	"context"
	"io"
	"log"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// readers counts zmq4's queued-message reader goroutines (SUB, DEALER)
// and those of them blocked sending to their full queue.
func readers() (all, blocked int) {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "zmq4.(*qreader).listen(") {
			all++
			if strings.Contains(g, "[chan send") {
				blocked++
			}
		}
	}
	return all, blocked
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A SUB that stopped receiving while its publisher kept sending has its
// reader goroutine blocked on the full queue, where zmq4 v0.17.0 never
// looks at the socket's context: closing the socket leaves it there for
// good (seen as a goleak report in the event plane's tests). Drain ends
// it. (Closing instead of draining, this test times out on the last wait.)
func TestDrainEndsAReaderBlockedOnItsQueue(t *testing.T) {
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	pub := zmq4.NewPub(context.Background(), quiet)
	defer pub.Close()
	if err := pub.Listen(Endpoint("tcp://127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	before, _ := readers()
	conns := NewConns()
	ctx, cancel := context.WithCancel(WithOptions(context.Background(), Options{Conns: conns}))
	sub := zmq4.NewSub(ctx, quiet)
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Dial(Endpoint("tcp://" + pub.Addr().String())); err != nil {
		t.Fatal(err)
	}
	// Publish (the subscription may take a moment to reach the PUB) until
	// the SUB's reader is blocked on its full queue.
	waitUntil(t, "the SUB's reader blocked on its full queue", func() bool {
		for range 20 {
			if err := pub.Send(zmq4.NewMsgString("x")); err != nil {
				t.Fatal(err)
			}
		}
		_, blocked := readers()
		return blocked == 1
	})
	if err := Drain(sub, conns, cancel, time.Second); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the SUB's reader to end", func() bool { n, _ := readers(); return n == before })
}
