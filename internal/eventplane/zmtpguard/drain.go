package zmtpguard

import (
	"context"
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
	return s.Close()
}
