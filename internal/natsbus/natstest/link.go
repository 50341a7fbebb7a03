package natstest

import (
	"io"
	"net"
	"sync"
)

// link is a TCP relay carrying one node's route connections to another
// node's cluster port: cutting it is a network partition between the two,
// with both servers and their clients left running.
type link struct {
	ln net.Listener

	mu     sync.Mutex
	target string // "" until the target node has started
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// newLink listens on a free loopback port; what it accepts is relayed to
// the target set by setTarget (refused until then).
func newLink() (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, conns: map[net.Conn]struct{}{}}
	l.wg.Go(l.accept)
	return l, nil
}

func (l *link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.down {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		l.wg.Go(func() { l.relay(c) })
	}
}

// setTarget sets the address relayed to.
func (l *link) setTarget(addr string) {
	l.mu.Lock()
	l.target = addr
	l.mu.Unlock()
}

func (l *link) relay(c net.Conn) {
	defer l.drop(c)
	l.mu.Lock()
	target := l.target
	l.mu.Unlock()
	if target == "" {
		return
	}
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	l.mu.Lock()
	if l.down {
		l.mu.Unlock()
		up.Close()
		return
	}
	l.conns[up] = struct{}{}
	l.mu.Unlock()
	defer l.drop(up)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
		c.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	up.Close()
	<-done
}

func (l *link) drop(c net.Conn) {
	c.Close()
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// set cuts the link (every connection closed, new ones refused) or
// restores it.
func (l *link) set(down bool) {
	l.mu.Lock()
	l.down = down
	var cs []net.Conn
	if down {
		for c := range l.conns {
			cs = append(cs, c)
		}
	}
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// close stops the relay and waits for its goroutines.
func (l *link) close() {
	l.ln.Close()
	l.set(true)
	l.wg.Wait()
}
