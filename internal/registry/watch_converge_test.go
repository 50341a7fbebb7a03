package registry

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// cutProxy forwards TCP connections to a NATS server; cut closes them all
// and makes it refuse new ones (accept, then close) until heal: a
// watcher's connection is cut while the server goes on.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() { _ = ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		var s net.Conn
		if !p.down {
			s, _ = net.Dial("tcp", p.target)
		}
		if s == nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			_ = dst.Close()
			_ = src.Close()
		}
		p.wg.Go(func() { pipe(s, c) })
		p.wg.Go(func() { pipe(c, s) })
	}
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *cutProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func connectJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// mirror folds a watcher's changes into the set of live keys (with each
// one's record name): what a reader of the watcher believes the bucket
// holds.
type mirror struct {
	mu   sync.Mutex
	live map[string]string
	log  []string
	done chan struct{}
}

func follow(w *Watcher[fleet.WorkerRecord]) *mirror {
	m := &mirror{live: map[string]string{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for c := range w.C() {
			m.mu.Lock()
			m.log = append(m.log, c.Kind.String()+" "+c.Key)
			switch c.Kind {
			case fleet.Put:
				m.live[c.Key] = c.Value.Name
			case fleet.Deleted, fleet.Expired, fleet.Invalid:
				delete(m.live, c.Key)
			}
			m.mu.Unlock()
		}
	}()
	return m
}

func (m *mirror) snapshot() (map[string]string, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.live), slices.Clone(m.log)
}

// waitFor polls until the mirror holds exactly want.
func (m *mirror) waitFor(t *testing.T, d time.Duration, what string, want map[string]string) {
	t.Helper()
	poll.UntilState(t, d, func() (bool, string) {
		got, log := m.snapshot()
		return maps.Equal(got, want), fmt.Sprintf("it believes %v (changes: %v)", got, log)
	}, fmt.Sprintf("%s: the watcher's reader to believe %v", what, want))
}

// holds checks, polling for d, that the mirror keeps holding exactly want:
// nothing is reported in that window.
func (m *mirror) holds(t *testing.T, d time.Duration, what string, want map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, log := m.snapshot(); !maps.Equal(got, want) {
			t.Fatalf("%s: the watcher's reader believes %v, want %v still (changes: %v)", what, got, want, log)
		}
	}
}

// watching opens a writer's bucket at writerURL and a watcher's at
// watcherURL (the same server, possibly through a proxy), both with ttl,
// and follows the watcher until the test ends.
func watching(t *testing.T, writerURL, watcherURL string, ttl time.Duration) (*Bucket[fleet.WorkerRecord], *mirror) {
	t.Helper()
	ctx := context.Background()
	wb, err := OpenBucket[fleet.WorkerRecord](ctx, connectJS(t, writerURL), "reg", ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := OpenBucket[fleet.WorkerRecord](ctx, connectJS(t, watcherURL), "reg", ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := rb.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := follow(w)
	t.Cleanup(func() { w.Stop(); <-m.done })
	return wb, m
}

// restartSwallowingJS restarts srv as a server without JetStream whose
// JetStream requests a test subscriber swallows (no reply, as when a
// reply is lost in a restart), and returns once the watcher has sent one
// after reconnecting. JetStream stays off until the caller restarts srv.
func restartSwallowingJS(t *testing.T, srv *natstest.Restartable) {
	t.Helper()
	srv.Stop()
	srv.Start(false)
	var swallowed atomic.Int64
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("$JS.API.>", func(*nats.Msg) { swallowed.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool { return swallowed.Load() != 0 }, "a JetStream request from the watcher after reconnecting")
}

// retry runs fn until it succeeds (the connection may be reconnecting).
func retry(t *testing.T, what string, fn func(ctx context.Context) error) {
	t.Helper()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := fn(ctx); err != nil {
			return false, err.Error()
		}
		return true, ""
	}, what)
}

// TestWatchConvergesAfterLostReply is the deterministic reproduction of
// issue 10 (chaos: a router kept routing to a worker whose registration
// had expired, never logging its removal). After a reconnect the watcher
// re-created its watch with a JetStream request that waited for its reply
// without bound, on the watcher's only goroutine. When that reply was lost
// (here: the server that came back answers no JetStream request, as one
// restarting does), the watcher went silent for good: no expiry, no
// deletion, no new record, even after JetStream was back. Now each request
// is bounded and retried, and the watcher converges on the bucket.
func TestWatchConvergesAfterLostReply(t *testing.T) {
	defer func(d time.Duration) { watchTimeout = d }(watchTimeout)
	watchTimeout = 500 * time.Millisecond
	srv := natstest.StartRestartable(t)
	url := srv.URL()
	ctx := context.Background()
	wb, m := watching(t, url, url, testTTL)
	expiring, err := wb.Keep(ctx, "a", fleet.WorkerRecord{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer expiring.Abandon()
	deleted, err := wb.Keep(ctx, "b", fleet.WorkerRecord{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	defer deleted.Abandon()
	m.waitFor(t, 5*time.Second, "before the restart", map[string]string{"a": "a", "b": "b"})

	// The server restarts as one that swallows every JetStream request.
	restartSwallowingJS(t, srv)

	// JetStream is back. One record expires (its owner stopped), one is
	// deleted, one is new.
	srv.Stop()
	srv.Start(true)
	expiring.Abandon()
	retry(t, "deleting b", func(ctx context.Context) error { return deleted.Close(ctx) })
	var fresh *Lease[fleet.WorkerRecord]
	retry(t, "registering c", func(ctx context.Context) (err error) {
		fresh, err = wb.Keep(ctx, "c", fleet.WorkerRecord{Name: "c"})
		return err
	})
	defer fresh.Abandon()
	m.waitFor(t, 10*time.Second, "after JetStream came back", map[string]string{"c": "c"})
	// And it goes on: a new registration, then its expiry.
	late, err := wb.Keep(ctx, "d", fleet.WorkerRecord{Name: "d"})
	if err != nil {
		t.Fatal(err)
	}
	m.waitFor(t, 5*time.Second, "a new registration", map[string]string{"c": "c", "d": "d"})
	late.Abandon()
	m.waitFor(t, 5*time.Second, "its expiry", map[string]string{"c": "c"})
}

// TestWatchReportsExpiryMissedWhileBlind is issue 10 as the chaos suite
// saw it: a record expires and its owner registers again while the
// watcher is blind (its re-watch request lost in a NATS restart). The
// bucket keeps one entry per key, so the expiry marker is gone by the
// time the watcher looks again: it used to take the new registration for
// a heartbeat and never report the expiry (the router never removed the
// worker). The expiry must reach the reader before the new registration.
func TestWatchReportsExpiryMissedWhileBlind(t *testing.T) {
	defer func(d time.Duration) { watchTimeout = d }(watchTimeout)
	watchTimeout = 500 * time.Millisecond
	const ttl = 3 * time.Second // longer than it takes to lose the reply
	srv := natstest.StartRestartable(t)
	url := srv.URL()
	ctx := context.Background()
	wb, m := watching(t, url, url, ttl)
	first, err := wb.Keep(ctx, "w", fleet.WorkerRecord{Name: "first"})
	if err != nil {
		t.Fatal(err)
	}
	m.waitFor(t, 5*time.Second, "registered", map[string]string{"w": "first"})
	first.Abandon()

	// NATS restarts; the first server back answers no JetStream request.
	restartSwallowingJS(t, srv)
	srv.Stop()
	srv.Start(true)

	// The record expires on the server; its owner registers again.
	kv, err := connectJS(t, url).KeyValue(ctx, "reg")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool {
		_, err := kv.Get(ctx, "w")
		return err != nil
	}, "the record to expire on the server")
	again, err := wb.Keep(ctx, "w", fleet.WorkerRecord{Name: "again"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Abandon()
	m.waitFor(t, 10*time.Second, "registered again", map[string]string{"w": "again"})
	_, log := m.snapshot()
	// Wanted: put w (first), expired w, put w (again), as the log ends.
	if n := len(log); n < 3 || log[n-3] != "put w" || log[n-2] != "expired w" || log[n-1] != "put w" {
		t.Fatalf("the expiry never reached the reader before the new registration: %v", log)
	}
}

// TestWatchWhileCut: the watcher's connection is cut (the server goes on)
// while one record's heartbeats stop, one is deleted and one is added.
// While cut, nothing is reported, even past the TTL: the missing
// heartbeats are the watcher's outage, not the workers' (a router must not
// drop its whole fleet for a NATS blip). Once the connection is back, the
// reader holds what the bucket holds: the expired and the deleted record
// gone, the added one there.
func TestWatchWhileCut(t *testing.T) {
	defer func(d time.Duration) { watchTimeout = d }(watchTimeout)
	watchTimeout = 500 * time.Millisecond
	srv := natstest.StartRestartable(t)
	p := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()))
	ctx := context.Background()
	wb, m := watching(t, srv.URL(), p.url(), testTTL)
	leases := map[string]*Lease[fleet.WorkerRecord]{}
	for _, k := range []string{"expires", "deleted", "stays"} {
		l, err := wb.Keep(ctx, k, fleet.WorkerRecord{Name: k})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Abandon()
		leases[k] = l
	}
	m.waitFor(t, 5*time.Second, "before the cut", map[string]string{"expires": "expires", "deleted": "deleted", "stays": "stays"})

	p.cut()
	leases["expires"].Abandon()
	// The record is gone on the server (a connected watcher would report
	// it), and the cut watcher still holds it, for a while after.
	kv, err := connectJS(t, srv.URL()).KeyValue(ctx, "reg")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, func() bool {
		_, err := kv.Get(ctx, "expires")
		return err != nil
	}, "the abandoned record expired on the server")
	m.holds(t, 2*watchTimeout, "while cut", map[string]string{"expires": "expires", "deleted": "deleted", "stays": "stays"})
	if err := leases["deleted"].Close(ctx); err != nil {
		t.Fatal(err)
	}
	added, err := wb.Keep(ctx, "added", fleet.WorkerRecord{Name: "added"})
	if err != nil {
		t.Fatal(err)
	}
	defer added.Abandon()
	p.heal()
	m.waitFor(t, 5*time.Second, "after the cut", map[string]string{"stays": "stays", "added": "added"})
}

// TestWatchResyncRepairsLostConsumer: the watch's consumer disappears on
// the server without any reconnect (deleted by an operator, lost by a
// JetStream cluster), so the watch misses everything after it; the
// periodic re-read repairs it (the client library alone would notice only
// after its heartbeat timeout, ~10 s).
func TestWatchResyncRepairsLostConsumer(t *testing.T) {
	srv := natstest.StartRestartable(t)
	ctx := context.Background()
	js := connectJS(t, srv.URL())
	b, err := OpenBucket[fleet.WorkerRecord](ctx, js, "reg", 3*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(ctx, ResyncEvery(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	m := follow(w)
	defer func() { w.Stop(); <-m.done }()
	m.waitFor(t, 5*time.Second, "synced", map[string]string{})
	st, err := js.Stream(ctx, "KV_reg")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ci := range st.ListConsumers(ctx).Info() {
		if err := st.DeleteConsumer(ctx, ci.Name); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no consumer to delete")
	}
	l, err := b.Keep(ctx, "new", fleet.WorkerRecord{Name: "new"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abandon()
	m.waitFor(t, 4*time.Second, "after the consumer vanished", map[string]string{"new": "new"})
}
