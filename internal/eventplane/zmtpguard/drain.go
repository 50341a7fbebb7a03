package zmtpguard

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Conns is the set of one socket's live connections (Options.Conns).
type Conns struct {
	mu     sync.Mutex
	m      map[*Conn]struct{}
	closed bool
}

// NewConns returns an empty set.
func NewConns() *Conns { return &Conns{m: map[*Conn]struct{}{}} }

// track adds c to its socket's set; once the set is closed, c is closed
// at once.
func track(c *Conn) net.Conn {
	s := c.o.Conns
	if s == nil {
		return c
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.m[c] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		_ = c.Conn.Close()
	}
	return c
}

func (s *Conns) remove(c *Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// Close closes every connection of the set, and any added later.
func (s *Conns) Close() {
	s.mu.Lock()
	s.closed = true
	cs := make([]*Conn, 0, len(s.m))
	for c := range s.m {
		cs = append(cs, c)
	}
	clear(s.m)
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Conn.Close()
	}
}

// Drain closes a SUB or DEALER socket s without leaving a zmq4 reader
// goroutine behind. zmq4 v0.17.0 reads each connection on a goroutine
// that queues messages (ten at most) for Recv and, once the queue is full,
// blocks on it without watching the socket's context: closing a socket
// whose peer kept sending after its last Recv left that goroutine blocked
// for good. Drain closes s's connections (conns, given in the options of
// the context s was made with), so that each reader queues its
// connection's error and ends; receives until that error comes; then
// cancels s's context (cancel) and closes s. wait bounds the receiving
// when no reader is left to report (the connection had already failed).
func Drain(s zmq4.Socket, conns *Conns, cancel context.CancelFunc, wait time.Duration) error {
	conns.Close()
	t := time.AfterFunc(wait, cancel)
	defer t.Stop()
	for {
		if _, err := s.Recv(); err != nil {
			break
		}
	}
	cancel()
	if err := s.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err // the connections were closed above already
	}
	return nil
}

// Sock is a SUB or DEALER socket that can be closed without leaving
// zmq4's reader goroutine behind: its context is its own (a caller's
// context ending must not be what stops the socket, see Drain), and Shut
// drains it.
type Sock struct {
	zmq4.Socket
	conns   *Conns
	cancel  context.CancelFunc
	unwatch func() bool
}

// NewSock makes a socket with mk on a context of its own carrying o (with
// a fresh connection set).
func NewSock(o Options, mk func(context.Context) zmq4.Socket) *Sock {
	o.Conns = NewConns()
	ctx, cancel := context.WithCancel(WithOptions(context.Background(), o))
	return &Sock{Socket: mk(ctx), conns: o.Conns, cancel: cancel, unwatch: func() bool { return false }}
}

// Abort ends the socket's context and closes its connections: a Dial
// stops, whether it was retrying or waiting for the peer's greeting.
func (s *Sock) Abort() {
	s.cancel()
	s.conns.Close()
}

// Watch makes ctx ending close the socket's connections: a waiting Recv
// then returns what was queued, then the connection's error.
func (s *Sock) Watch(ctx context.Context) {
	s.unwatch()
	s.unwatch = context.AfterFunc(ctx, s.conns.Close)
}

// Shut closes the socket: drained (Drain, waiting at most wait) unless
// drain is false, which says Recv already returned the connection's
// error (its reader is gone).
func (s *Sock) Shut(drain bool, wait time.Duration) {
	s.unwatch()
	if drain {
		_ = Drain(s.Socket, s.conns, s.cancel, wait)
		return
	}
	s.cancel()
	_ = s.Socket.Close()
}
