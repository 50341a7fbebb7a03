package zmtpguard

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
)

// refusals collects what Options.Refused reports.
type refusals struct {
	mu   sync.Mutex
	errs []error
}

func (r *refusals) add(_ net.Addr, err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *refusals) count(target error) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, err := range r.errs {
		if errors.Is(err, target) {
			n++
		}
	}
	return n
}

// boundPub binds a PUB on a guarded loopback endpoint with o.
func boundPub(t *testing.T, o Options) zmq4.Socket {
	t.Helper()
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	pub := zmq4.NewPub(WithOptions(context.Background(), o), quiet)
	t.Cleanup(func() { _ = pub.Close() })
	if err := pub.Listen(Endpoint("tcp://127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	return pub
}

// silentConn opens a TCP connection to addr that sends nothing.
func silentConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// subscribed dials a SUB to the PUB and publishes until the SUB receives
// a message, failing t if none arrives within 10 s.
func subscribed(t *testing.T, pub zmq4.Socket) {
	t.Helper()
	if err := trySubscribe(t, pub); err != nil {
		t.Fatalf("SUB: %v", err)
	}
}

// trySubscribe is subscribed returning the SUB's dial or receive error.
func trySubscribe(t *testing.T, pub zmq4.Socket) error {
	t.Helper()
	quiet := zmq4.WithLogger(log.New(io.Discard, "", 0))
	sock := NewSock(Options{}, func(ctx context.Context) zmq4.Socket { return zmq4.NewSub(ctx, quiet) })
	defer sock.Shut(true, time.Second)
	if err := sock.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		if err := sock.Dial(Endpoint("tcp://" + pub.Addr().String())); err != nil {
			got <- err
			return
		}
		_, err := sock.Recv()
		got <- err
	}()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-got:
			return err
		case <-deadline:
			sock.Abort()
			<-got
			t.Fatal("a SUB got no message within 10 s: the PUB did not accept it")
		case <-time.After(20 * time.Millisecond):
			if err := pub.Send(zmq4.NewMsgString("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// zmq4 runs each accepted connection's handshake on its accepting
// goroutine, with no deadline: before the screening listener, one TCP
// connection that sent nothing kept a bound socket from accepting anyone
// (this test then timed out waiting for the SUB's first message). The
// handshake timeout is a minute here, so only the screening can let the
// SUB in.
func TestSilentConnectionsDoNotBlockAccepts(t *testing.T) {
	pub := boundPub(t, Options{HandshakeTimeout: time.Minute})
	for range 3 {
		silentConn(t, pub.Addr().String())
	}
	subscribed(t, pub)
}

// A peer that sends its signature and then stalls holds zmq4's accept
// loop in the handshake: the guard closes it at the handshake timeout,
// reports it, and the socket accepts again. (Before the timeout existed
// the connection stayed open for good.)
func TestStalledHandshakeIsClosedAtTheTimeout(t *testing.T) {
	var r refusals
	pub := boundPub(t, Options{HandshakeTimeout: 300 * time.Millisecond, Refused: r.add})
	c := silentConn(t, pub.Addr().String())
	if _, err := c.Write(zmtptest.Greeting()[:signatureLen]); err != nil {
		t.Fatal(err)
	}
	zmtptest.WaitDropped(t, c, 10*time.Second)
	waitUntil(t, "the timeout's report", func() bool { return r.count(ErrHandshakeTimeout) == 1 })
	subscribed(t, pub)
}

// A silent connection is closed at the timeout, and reported.
func TestSilentConnectionIsClosedAtTheTimeout(t *testing.T) {
	var r refusals
	pub := boundPub(t, Options{HandshakeTimeout: 300 * time.Millisecond, Refused: r.add})
	zmtptest.WaitDropped(t, silentConn(t, pub.Addr().String()), 10*time.Second)
	waitUntil(t, "the timeout's report", func() bool { return r.count(ErrHandshakeTimeout) == 1 })
}

// libzmq (pyzmq, vLLM) sends its 10-byte signature and waits for the
// other side's before the rest of its greeting: the screening must hand
// such a peer to zmq4 after the signature, or neither side would speak.
func TestSignatureAloneGetsTheGreeting(t *testing.T) {
	pub := boundPub(t, Options{HandshakeTimeout: time.Minute})
	c := silentConn(t, pub.Addr().String())
	if _, err := c.Write(zmtptest.Greeting()[:signatureLen]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, signatureLen)
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("no greeting from the PUB after our signature: %v", err)
	}
	if got[0] != 0xff || got[9] != 0x7f {
		t.Fatalf("greeting starts % x, want a ZMTP signature", got)
	}
}

// Connections waiting for their greeting are bounded: past
// MaxPendingHandshakes a new one is closed on arrival, and reported.
func TestPendingHandshakesAreBounded(t *testing.T) {
	var r refusals
	pub := boundPub(t, Options{HandshakeTimeout: time.Minute, MaxPendingHandshakes: 2, Refused: r.add})
	a, b := silentConn(t, pub.Addr().String()), silentConn(t, pub.Addr().String())
	zmtptest.WaitDropped(t, silentConn(t, pub.Addr().String()), 10*time.Second)
	waitUntil(t, "the refusal's report", func() bool { return r.count(ErrTooManyPending) == 1 })
	// The first two are still waiting: closing them frees their slots,
	// once the listener's read of each returns (a SUB arriving before
	// that is refused like the third connection, so it tries again).
	a.Close()
	b.Close()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err = trySubscribe(t, pub); err == nil {
			return
		}
	}
	t.Fatalf("no SUB accepted within 10 s of closing the pending connections: %v", err)
}
