package zmtpguard

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrHandshakeTimeout is returned (wrapped) when a peer did not send its
// greeting, or did not finish its handshake, within the handshake
// timeout; the connection is closed.
var ErrHandshakeTimeout = errors.New("zmtp peer did not complete its handshake in time")

// ErrTooManyPending is reported (Options.Refused) for a connection
// closed on arrival because MaxPendingHandshakes others were still
// waiting for their greetings.
var ErrTooManyPending = errors.New("too many zmtp connections waiting for their greeting")

// DefaultHandshakeTimeout is the default Options.HandshakeTimeout: ample
// for a peer across a network, short enough that a silent connection
// goes away.
const DefaultHandshakeTimeout = 10 * time.Second

// DefaultMaxPendingHandshakes is the default Options.MaxPendingHandshakes.
const DefaultMaxPendingHandshakes = 128

// signatureLen is the length of the greeting's signature (0xff, 8 bytes,
// 0x7f), which every ZMTP 3 peer sends as soon as it connects. libzmq
// sends it alone and waits for the other side's before the rest of its
// greeting; zmq4 sends the whole greeting at once.
const signatureLen = 10

// acceptBackoff is the pause after a failed accept that was not the
// listener closing (out of file descriptors, say).
const acceptBackoff = 20 * time.Millisecond

// zmq4 v0.17.0 accepts a connection and runs its handshake on the same
// goroutine, with no deadline, before it accepts the next: one TCP
// connection that never sends its greeting stopped a bound socket from
// accepting anyone else, for as long as it stayed open. The listener
// below therefore accepts on a goroutine of its own and hands zmq4 only
// connections that sent their signature within the handshake timeout,
// each waited for on its own goroutine (MaxPendingHandshakes at most; more
// are closed on arrival); and every guarded connection is closed unless
// its handshake has passed within the timeout (Conn), so that a peer
// that sends its signature and then stalls holds zmq4's accept loop for
// that long only.

// screener is a net.Listener whose Accept returns only connections that
// sent their greeting's signature in time, wrapped in Conn.
type screener struct {
	inner net.Listener
	o     Options
	ready chan net.Conn
	slots chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	err     error // why Accept fails, once done is closed
	pending map[net.Conn]struct{}
	closed  bool
}

func newScreener(inner net.Listener, o Options) *screener {
	l := &screener{inner: inner, o: o, ready: make(chan net.Conn), done: make(chan struct{}),
		slots: make(chan struct{}, o.MaxPendingHandshakes), pending: map[net.Conn]struct{}{}}
	l.wg.Add(1)
	go l.loop()
	return l
}

var _ net.Listener = (*screener)(nil)

// Accept implements net.Listener.
func (l *screener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// Addr implements net.Listener.
func (l *screener) Addr() net.Addr { return l.inner.Addr() }

// Close implements net.Listener: it closes the inner listener and the
// connections still waiting for their greeting, and returns once the
// listener's goroutines have ended.
func (l *screener) Close() error {
	err := l.inner.Close()
	l.stop(net.ErrClosed)
	l.wg.Wait()
	return err
}

// stop makes Accept fail with err from now on and closes the pending
// connections.
func (l *screener) stop(err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed, l.err = true, err
	close(l.done)
	pending := l.pending
	l.pending = nil
	l.mu.Unlock()
	for c := range pending {
		_ = c.Close()
	}
}

func (l *screener) loop() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.stop(err)
				return
			}
			select {
			case <-time.After(acceptBackoff):
				continue
			case <-l.done:
				return
			}
		}
		select {
		case l.slots <- struct{}{}:
		default:
			_ = c.Close()
			l.refused(c, fmt.Errorf("%w (%d)", ErrTooManyPending, cap(l.slots)))
			continue
		}
		l.wg.Add(1)
		go l.screen(c)
	}
}

func (l *screener) refused(c net.Conn, err error) {
	if l.o.Refused != nil {
		l.o.Refused(c.RemoteAddr(), err)
	}
}

// screen waits for c's signature and queues c for Accept.
func (l *screener) screen(c net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.slots }()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	_ = c.SetReadDeadline(time.Now().Add(l.o.HandshakeTimeout))
	head := make([]byte, GreetingLen)
	n, err := io.ReadAtLeast(c, head, signatureLen)
	l.mu.Lock()
	delete(l.pending, c)
	closed := l.closed
	l.mu.Unlock()
	if err != nil || closed {
		_ = c.Close()
		var ne net.Error
		if !closed && errors.As(err, &ne) && ne.Timeout() {
			l.refused(c, fmt.Errorf("%w: no greeting within %v", ErrHandshakeTimeout, l.o.HandshakeTimeout))
		}
		return // a peer that closed before its greeting (a port probe) is not worth a report
	}
	_ = c.SetReadDeadline(time.Time{})
	gc := track(NewConn(&headConn{Conn: c, head: head[:n]}, l.o))
	select {
	case l.ready <- gc:
	case <-l.done:
		_ = gc.Close()
	}
}

// headConn is a connection whose first bytes were read already: Read
// returns them first.
type headConn struct {
	net.Conn
	head []byte
}

// Read implements net.Conn.
func (c *headConn) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
