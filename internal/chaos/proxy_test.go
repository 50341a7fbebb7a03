package chaos

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxy is a TCP proxy in front of one worker's HTTP port. It stays up
// across worker restarts (the router only ever sees the proxy's address)
// and injects the network faults: a stall (bytes from the worker stop
// flowing, connections stay open: a worker that stops answering
// mid-stream) and a cut (every open connection closed at once).
type proxy struct {
	ln      net.Listener
	backend atomic.Value // string: the worker's current address
	stalled atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wake  chan struct{} // closed when a stall ends
	wg    sync.WaitGroup
}

func newProxy(backend string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, conns: map[net.Conn]struct{}{}, wake: make(chan struct{})}
	p.backend.Store(backend)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setBackend(a string) { p.backend.Store(a) }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	b, err := net.Dial("tcp", p.backend.Load().(string))
	if err != nil {
		return // the router sees a reset: a worker that is down
	}
	if !p.track(b) {
		b.Close()
		return
	}
	defer p.untrack(b)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(b, c); done <- struct{}{} }()
	go func() { p.copyBack(c, b); done <- struct{}{} }()
	<-done
	c.Close()
	b.Close()
	<-done
}

// copyBack copies worker → client, holding bytes while stalled.
func (p *proxy) copyBack(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for n > 0 && p.stalled.Load() {
			p.mu.Lock()
			w := p.wake
			p.mu.Unlock()
			if !p.stalled.Load() {
				break
			}
			<-w
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stall stops (on) or resumes (off) the worker → client direction.
func (p *proxy) stall(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.stalled.Load() {
		return
	}
	p.stalled.Store(on)
	if !on {
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// cut closes every open connection (both sides).
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// close stops the proxy and waits for its goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.stall(false)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
