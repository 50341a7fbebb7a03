// Package zmtptest builds hostile ZMTP peers for tests: a greeting, a
// frame header announcing any size (the "frame bomb"), and helpers that
// play the bomb against a socket over real TCP.
package zmtptest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// Greeting returns a ZMTP 3.0 greeting with the NULL mechanism.
func Greeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 0
	copy(g[12:], "NULL")
	return g
}

// LongHeader returns a frame header with the LONG bit and flags, and an
// 8-byte big-endian size.
func LongHeader(flags byte, size uint64) []byte {
	h := make([]byte, 9)
	h[0] = flags | 0x02
	binary.BigEndian.PutUint64(h[1:], size)
	return h
}

// Bomb is a greeting followed by a long command header announcing size
// bytes: 06 00 00 01 00 00 00 00 00 announces 1 TiB.
func Bomb(size uint64) []byte {
	return append(Greeting(), LongHeader(0x04, size)...)
}

// Ready returns a NULL-mechanism READY command frame announcing a socket
// of type socketType ("SUB", "DEALER", …).
func Ready(socketType string) []byte {
	body := append([]byte{5}, "READY"...)
	body = append(body, byte(len("Socket-Type")))
	body = append(body, "Socket-Type"...)
	body = binary.BigEndian.AppendUint32(body, uint32(len(socketType)))
	body = append(body, socketType...)
	return append([]byte{0x04, byte(len(body))}, body...)
}

// HandshakeBomb is a full handshake as socketType (greeting and READY)
// followed by a message frame header announcing size bytes: the bomb after
// the connection was accepted.
func HandshakeBomb(socketType string, size uint64) []byte {
	b := append(Greeting(), Ready(socketType)...)
	return append(b, LongHeader(0, size)...)
}

// BombSize is what the regression tests announce: large enough that an
// allocation by the claim shows in runtime.MemStats, small enough not to
// crash the test process when the guard is missing.
const BombSize = 1 << 30

// Allocated returns the bytes allocated so far (MemStats.TotalAlloc).
func Allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// WaitDropped reads c until the peer closes it and fails t if that does
// not happen within d. Whatever the peer sends before (its greeting) is
// discarded.
func WaitDropped(t testing.TB, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("peer %v did not drop the connection within %v of the frame bomb", c.RemoteAddr(), d)
	}
}

// BombDial connects to a bound socket at addr (host:port), sends Bomb(size)
// and waits until the socket drops the connection.
func BombDial(t testing.TB, addr string, size uint64) {
	t.Helper()
	SendDial(t, addr, Bomb(size))
}

// SendDial connects to a bound socket at addr (host:port), sends b and
// waits until the socket drops the connection.
func SendDial(t testing.TB, addr string, b []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dialling %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("sending the bomb: %v", err)
	}
	WaitDropped(t, c, 10*time.Second)
}

// Listener is a hostile "publisher": every connection it accepts gets
// Bomb(size) and is then read until the dialling socket drops it. Dropped
// receives one value per connection dropped in time, Late one per
// connection still open after 10 s.
type Listener struct {
	ln      net.Listener
	Dropped chan struct{}
	Late    chan struct{}
}

// NewListener listens on a free loopback port; Close it at the end.
func NewListener(t testing.TB, size uint64) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{ln: ln, Dropped: make(chan struct{}, 64), Late: make(chan struct{}, 64)}
	go l.serve(size)
	return l
}

// Endpoint returns "tcp://127.0.0.1:port".
func (l *Listener) Endpoint() string { return "tcp://" + l.ln.Addr().String() }

func (l *Listener) serve(size uint64) {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			if _, err := c.Write(Bomb(size)); err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err := io.Copy(io.Discard, c)
			var ne net.Error
			ch := l.Dropped
			if errors.As(err, &ne) && ne.Timeout() {
				ch = l.Late
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}()
	}
}

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// BlockedRouterReaders counts zmq4 ROUTER reader goroutines blocked
// queueing a message (the leak zmtpguard.RouterSock's Shut ends).
func BlockedRouterReaders() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "[chan send") && strings.Contains(g, "zmq4.(*routerQReader).listen") {
			n++
		}
	}
	return n
}
