package zmtpguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Options configure the guard of one socket's connections.
type Options struct {
	// MaxFrameBytes caps one frame's announced size; 0 means
	// DefaultMaxFrameBytes.
	MaxFrameBytes uint64
	// MaxConnBytes, when positive, caps everything one connection may
	// send over its life (greeting and handshake included); past it the
	// connection is closed with ErrTooMuchInput. For a PUB socket, whose
	// peers only ever send a few subscriptions that zmq4 keeps (one map
	// entry per topic) for as long as the connection lives.
	MaxConnBytes uint64
	// Refused, when not nil, is called once per connection the guard
	// closed (a frame over the cap, too much input, no handshake in time,
	// too many connections waiting for theirs), with the peer's address
	// and the error. It is called from zmq4's goroutines and the guard's
	// and must return quickly.
	Refused func(remote net.Addr, err error)
	// Conns, when not nil, holds the socket's live connections (dialled
	// and accepted), for Drain.
	Conns *Conns
	// HandshakeTimeout bounds the time a peer has to send its greeting
	// (accepted connections) and to finish its handshake (every
	// connection); past it the connection is closed (ErrHandshakeTimeout,
	// reported to Refused). 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxPendingHandshakes bounds the accepted connections of a bound
	// socket still waiting for their greeting; one more is closed on
	// arrival (ErrTooManyPending, reported to Refused). 0 means
	// DefaultMaxPendingHandshakes.
	MaxPendingHandshakes int
}

type optionsKey struct{}

// WithOptions returns a context that makes the guarded transports apply o
// to every connection of a zmq4 socket created with it.
func WithOptions(ctx context.Context, o Options) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

func optionsOf(ctx context.Context) Options {
	o, _ := ctx.Value(optionsKey{}).(Options)
	return o.withDefaults()
}

func (o Options) withDefaults() Options {
	if o.MaxFrameBytes == 0 {
		o.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxPendingHandshakes <= 0 {
		o.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	}
	return o
}

// Guarded transport names registered with zmq4.
const (
	TCP = "zmtpguard+tcp"
	IPC = "zmtpguard+ipc"
)

func init() {
	for name, network := range map[string]string{TCP: "tcp", IPC: "unix"} {
		if err := zmq4.RegisterTransport(name, guarded{inner: transport.New(network)}); err != nil {
			panic(fmt.Sprintf("zmtpguard: registering %s: %v", name, err))
		}
	}
}

// Endpoint returns ep on the guarded transport: "tcp://h:p" becomes
// "zmtpguard+tcp://h:p", "ipc://…" likewise; other endpoints (inproc,
// already guarded, malformed) are returned unchanged.
func Endpoint(ep string) string {
	for _, plain := range []string{"tcp", "ipc"} {
		if strings.HasPrefix(ep, plain+"://") {
			return "zmtpguard+" + ep
		}
	}
	return ep
}

var _ transport.Transport = guarded{}

// guarded is a zmq4 transport whose connections are wrapped in Conn.
type guarded struct {
	inner transport.Transport
}

// Dial implements transport.Transport.
func (g guarded) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := g.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	return track(NewConn(c, optionsOf(ctx))), nil
}

// Listen implements transport.Transport.
func (g guarded) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := g.inner.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return newScreener(l, optionsOf(ctx)), nil
}

// Addr implements transport.Transport.
func (g guarded) Addr(ep string) (string, error) { return g.inner.Addr(ep) }

// Conn is a net.Conn whose reads are checked frame by frame: once a frame
// header announces more than the cap, the connection is closed and Read
// returns the wrapped ErrFrameTooLarge, without passing on the header.
type Conn struct {
	net.Conn
	o     Options
	mu    sync.Mutex // serialises Read (zmq4 reads from one goroutine at a time)
	p     Parser
	total uint64 // bytes read so far
	err   error  // the refusal, once refused
	once  sync.Once

	shook    atomic.Bool // the peer's handshake has passed
	timedOut atomic.Bool // closed by the handshake timer
	timer    *time.Timer
}

// NewConn guards c, which must be at the start of a ZMTP stream (before
// the peer's greeting). Unless the peer's handshake has passed within
// o.HandshakeTimeout, c is closed then.
func NewConn(c net.Conn, o Options) *Conn {
	o = o.withDefaults()
	g := &Conn{Conn: c, o: o, p: NewParser(o.MaxFrameBytes)}
	g.timer = time.AfterFunc(o.HandshakeTimeout, g.handshakeExpired)
	return g
}

// handshakeExpired closes the connection if the peer's handshake has not
// passed: zmq4 waits for it with no deadline (and leaves a connection
// whose handshake failed open).
func (c *Conn) handshakeExpired() {
	if c.shook.Load() {
		return
	}
	c.timedOut.Store(true)
	c.once.Do(func() {
		_ = c.Conn.Close()
		if c.o.Refused != nil {
			c.o.Refused(c.Conn.RemoteAddr(), c.timeoutErr())
		}
	})
}

func (c *Conn) timeoutErr() error {
	return fmt.Errorf("%w: handshake not done within %v", ErrHandshakeTimeout, c.o.HandshakeTimeout)
}

// Close implements net.Conn.
func (c *Conn) Close() error {
	c.timer.Stop()
	if c.o.Conns != nil {
		c.o.Conns.remove(c)
	}
	return c.Conn.Close()
}

// Read implements net.Conn.
func (c *Conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, refusedError{c.err}
	}
	n, err := c.Conn.Read(b)
	if c.timedOut.Load() {
		c.err = c.timeoutErr()
		return 0, refusedError{c.err}
	}
	c.total += uint64(n)
	perr := c.p.Feed(b[:n])
	if perr == nil && !c.shook.Load() && c.p.Handshaken() {
		c.shook.Store(true)
		c.timer.Stop()
	}
	if perr == nil && c.o.MaxConnBytes > 0 && c.total > c.o.MaxConnBytes {
		perr = fmt.Errorf("%w: %d bytes, cap %d", ErrTooMuchInput, c.total, c.o.MaxConnBytes)
	}
	if perr != nil {
		c.err = perr
		c.once.Do(func() {
			_ = c.Conn.Close()
			if c.o.Refused != nil {
				c.o.Refused(c.Conn.RemoteAddr(), perr)
			}
		})
		return 0, refusedError{perr}
	}
	return n, err
}

// ErrTooMuchInput is returned (wrapped) when a connection sent more than
// Options.MaxConnBytes; the connection is closed.
var ErrTooMuchInput = errors.New("zmtp peer sent more than the connection cap")

// DefaultMaxSubscriberBytes is the MaxConnBytes of publishers' PUB
// sockets: room for thousands of subscriptions, and a bound on what a
// stranger can make zmq4 keep per connection.
const DefaultMaxSubscriberBytes = 1 << 20

// refusedError is a net.Error that is not a timeout: zmq4 takes only such
// errors (and EOF) for a closed connection, which it then drops and, on a
// socket that reconnects, dials again.
type refusedError struct{ err error }

var _ net.Error = refusedError{}

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() error   { return e.err }
func (e refusedError) Timeout() bool   { return false }
func (e refusedError) Temporary() bool { return false }

// Cap turns a configured size (0 for the default) into an Options cap:
// n when positive, def otherwise.
func Cap(n int, def uint64) uint64 {
	if n <= 0 {
		return def
	}
	return uint64(n)
}
