package zmtpguard

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// RouterSock is a ROUTER socket that can be closed without leaving a zmq4
// reader goroutine behind. zmq4 v0.17.0 reads each connection of a ROUTER
// on a goroutine that queues messages (ten at most) and, once the queue is
// full, blocks on it without watching the socket's context: an asker that
// sent more requests than the owner had read when the socket closed (a
// flood, or replies it never read) left that goroutine blocked for good.
// Unlike SUB and DEALER (Drain), a ROUTER never queues its connections'
// errors, so there is no last message to wait for. Shut closes the
// connections instead, after which each reader queues at most one more
// message and ends, and receives until nothing has come for a quiet
// spell; only then is the socket's context cancelled. (A reader held up
// past the quiet spell still finds room in the emptied queue, unless more
// than ten are.) The owner's Recv drops what comes once Shut has begun and
// returns the socket's error at the end.
type RouterSock struct {
	zmq4.Socket
	conns   *Conns
	cancel  context.CancelFunc
	closing atomic.Bool
	seen    chan struct{} // a message dropped while closing (buffered: a wake-up)
}

// NewRouterSock makes a ROUTER with mk on a context of its own carrying o
// (with a fresh connection set).
func NewRouterSock(o Options, mk func(context.Context) zmq4.Socket) *RouterSock {
	o.Conns = NewConns()
	ctx, cancel := context.WithCancel(WithOptions(context.Background(), o))
	return &RouterSock{Socket: mk(ctx), conns: o.Conns, cancel: cancel, seen: make(chan struct{}, 1)}
}

// Recv returns the next message; once Shut has begun it drops every
// message and returns only the socket's error.
func (s *RouterSock) Recv() (zmq4.Msg, error) {
	for {
		m, err := s.Socket.Recv()
		if err != nil || !s.closing.Load() {
			return m, err
		}
		select {
		case s.seen <- struct{}{}:
		default:
		}
	}
}

// Shut closes the socket: it closes every connection, receives (beside
// the owner's Recv, which drops what it gets) until no message has come
// for quiet (at most max in all), then cancels the socket's context (a
// waiting Recv returns its error) and closes it. Safe to call more than
// once.
func (s *RouterSock) Shut(quiet, max time.Duration) error {
	if s.closing.Swap(true) {
		return nil
	}
	s.conns.Close()
	drained := make(chan struct{})
	go func() { // the owner may be busy: receive here too
		defer close(drained)
		for {
			if _, err := s.Recv(); err != nil {
				return
			}
		}
	}()
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	t := time.NewTimer(quiet)
	defer t.Stop()
wait:
	for {
		select {
		case <-s.seen:
			t.Reset(quiet)
		case <-t.C:
			break wait
		case <-deadline.C:
			break wait
		}
	}
	s.cancel()
	<-drained
	if err := s.Socket.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
