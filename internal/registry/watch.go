package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// DefaultResync is how often a watcher re-reads the whole bucket unless
// told otherwise (ResyncEvery).
const DefaultResync = 30 * time.Second

// watchTimeout bounds each (re-)watch request: its JetStream reply can be
// lost in a NATS restart, and an unbounded wait would silence the watcher
// for good.
var watchTimeout = 2 * time.Second

// WatchOption configures Bucket.Watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	resync time.Duration
}

// ResyncEvery sets how often the watcher re-reads the whole bucket to
// repair anything its watch missed (default DefaultResync; 0 or less
// disables the periodic re-read, not the one after each reconnect).
func ResyncEvery(d time.Duration) WatchOption {
	return func(c *watchConfig) { c.resync = d }
}

// Watcher delivers a bucket's changes: first every current value, then
// Synced, then live puts, deletions and expiries.
//
// Whatever happens to the connection, the changes converge on the
// bucket's contents: after every reconnect (and every resync period) the
// watcher reads the whole bucket again, reports the records it had missed
// as Put and those that left meanwhile as Deleted or Expired. A record
// whose heartbeats stop is reported Expired after the TTL while the
// connection is up, even if JetStream does not answer; while the
// connection is down nothing expires (the silence is the outage's), and
// the re-read after the reconnect settles what left.
type Watcher[T any] struct {
	c      chan fleet.Change[T]
	cancel context.CancelFunc
	done   chan struct{}
}

// C returns the channel of changes; it is closed when the watcher stops.
func (w *Watcher[T]) C() <-chan fleet.Change[T] { return w.c }

// Stop ends the watch and waits for its goroutine.
func (w *Watcher[T]) Stop() {
	w.cancel()
	<-w.done
}

// Watch starts watching every key of the bucket. The watch lives until
// Stop or until ctx ends.
func (b *Bucket[T]) Watch(ctx context.Context, opts ...WatchOption) (*Watcher[T], error) {
	cfg := watchConfig{resync: DefaultResync}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(ctx)
	kw, stop, err := b.openWatch(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	w := &Watcher[T]{c: make(chan fleet.Change[T], 64), cancel: cancel, done: make(chan struct{})}
	go b.watch(ctx, kw, stop, w, cfg)
	return w, nil
}

// openWatch starts a watch of every key (each key's last entry, then live
// changes), bounded by watchTimeout. The watch lives until stop is called
// or ctx ends.
func (b *Bucket[T]) openWatch(ctx context.Context) (jetstream.KeyWatcher, func(), error) {
	// The context given to WatchAll also ends the subscription, so the
	// bound cancels it rather than a deadline.
	limit := watchTimeout
	wctx, cancel := context.WithCancel(ctx)
	bound := time.AfterFunc(limit, cancel)
	kw, err := b.kv.WatchAll(wctx)
	if !bound.Stop() {
		if err == nil {
			_ = kw.Stop()
		}
		cancel()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("watching %s: no answer within %v", b.name, limit)
	}
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("watching %s: %w", b.name, err)
	}
	stop := func() {
		_ = kw.Stop()
		cancel()
		// The library's delivery blocks while its channel is full; let it
		// run out so that the subscription can close.
		go func() {
			t := time.NewTimer(limit)
			defer t.Stop()
			for {
				select {
				case _, ok := <-kw.Updates():
					if !ok {
						return
					}
				case <-t.C:
					return
				}
			}
		}()
	}
	return kw, stop, nil
}

// opened is the outcome of an openWatch run in the background.
type opened struct {
	kw   jetstream.KeyWatcher
	stop func()
	err  error
}

// watch runs the watcher: kw is a fresh watch (its first entries are the
// bucket's current contents), stop ends it.
func (b *Bucket[T]) watch(ctx context.Context, kw jetstream.KeyWatcher, stop func(), w *Watcher[T], cfg watchConfig) {
	defer close(w.done)
	defer close(w.c)
	l := &watchLoop[T]{b: b, ctx: ctx, w: w, cfg: cfg, v: newView(b.ttl), initial: true,
		stop: stop, updates: kw.Updates(), reconnects: b.reconnects(), lastSnap: time.Now()}
	defer l.end()
	l.v.begin()
	tick := time.NewTicker(max(b.ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	l.prevTick = time.Now()
	for {
		var more bool
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			more = l.tick(now)
		case o := <-l.opening:
			more = l.opened(o)
		case e, ok := <-l.updates:
			more = l.update(e, ok)
		}
		if !more {
			return
		}
	}
}

// watchLoop is the state of one watcher's goroutine (Bucket.watch).
//
// The watch is re-created (a fresh snapshot of the bucket, compared with
// what was reported) after a reconnect: a KV watch is a JetStream
// consumer that does not survive a server restart, and whatever happened
// while the connection was down went by unseen. The reconnect counter
// counts attempts, so the watch waits until the connection is up.
type watchLoop[T any] struct {
	b   *Bucket[T]
	ctx context.Context
	w   *Watcher[T]
	cfg watchConfig
	v   *view

	initial bool // the current snapshot is the initial values
	stop    func()
	updates <-chan jetstream.KeyValueEntry
	// The watch being opened, if any: it runs beside the loop so that
	// expiries are reported on time while JetStream is slow to answer.
	opening chan opened

	reconnects uint64
	resnap     bool // a fresh snapshot is wanted
	lastSnap   time.Time
	failures   int // re-watches failed in a row
	prevTick   time.Time
	down       bool // the previous tick found the connection down
}

// end stops the current watch and the one being opened, if any.
func (l *watchLoop[T]) end() {
	if l.stop != nil {
		l.stop()
	}
	if l.opening != nil { // ctx is done: it returns at once
		if o := <-l.opening; o.err == nil {
			o.stop()
		}
	}
}

// send delivers c; false when the watcher is stopping.
func (l *watchLoop[T]) send(c fleet.Change[T]) bool {
	select {
	case l.w.c <- c:
		return true
	case <-l.ctx.Done():
		return false
	}
}

// tick starts a re-watch when one is due (a reconnect, the resync
// period) and reports the records whose deadlines passed; false when the
// watcher is stopping.
func (l *watchLoop[T]) tick(now time.Time) bool {
	sinceTick := now.Sub(l.prevTick)
	l.prevTick = now
	if n := l.b.reconnects(); n != l.reconnects {
		l.reconnects, l.resnap = n, true
	}
	if l.cfg.resync > 0 && now.Sub(l.lastSnap) >= l.cfg.resync {
		l.resnap = true
	}
	if l.resnap && l.opening == nil && l.b.connected() {
		l.opening = make(chan opened, 1)
		go func(out chan<- opened) {
			kw, stop, err := l.b.openWatch(l.ctx)
			out <- opened{kw: kw, stop: stop, err: err}
		}(l.opening)
	}
	if !l.b.connected() {
		// Disconnected, the watcher hears no heartbeats: that silence is
		// this router's outage, not its workers'. The deadlines are held a
		// TTL ahead (a fleet is not dropped for a NATS blip), and after the
		// reconnect the re-read reports what really left; a record that
		// expired and came back meanwhile is still told Expired, then Put.
		l.v.hold(now, sinceTick)
		l.down = true
		return true
	}
	if l.down {
		// The first tick after the reconnect: the deadlines were held a
		// TTL ahead of the last tick that saw the connection down, up to
		// a tick (more on a loaded host) before the reconnect. Hold them
		// a TTL ahead of now, so every owner gets a whole TTL after this
		// router is back to reconnect and put its record again.
		l.v.hold(now, sinceTick)
		l.down = false
	}
	for _, k := range l.v.expire(now) {
		if !l.send(fleet.Change[T]{Kind: fleet.Expired, Key: k}) {
			return false
		}
	}
	return true
}

// opened switches to a re-watch that opened, or logs one that failed (it
// is retried on a later tick); false when the watcher is stopping.
func (l *watchLoop[T]) opened(o opened) bool {
	l.opening = nil
	if o.err != nil {
		if l.ctx.Err() != nil {
			return false
		}
		l.failures++
		lvl := l.b.log.Debug
		if l.failures == 1 {
			lvl = l.b.log.Warn
		}
		lvl("re-reading the bucket failed; retrying", "bucket", l.b.name, "attempt", l.failures, "err", o.err)
		return true
	}
	if l.stop != nil {
		l.stop()
	}
	l.stop, l.updates = o.stop, o.kw.Updates()
	l.v.begin()
	l.resnap, l.lastSnap, l.failures = false, time.Now(), 0
	return true
}

// update reports what entry e changes (e nil: the end of a snapshot), or
// re-watches when the library closed the watch (ok false); false when
// the watcher is stopping.
func (l *watchLoop[T]) update(e jetstream.KeyValueEntry, ok bool) bool {
	if !ok {
		// The library gave the watch up (its consumer could not be
		// re-created): start a new one.
		l.b.log.Warn("bucket watch closed by the client library; re-watching", "bucket", l.b.name)
		l.stop()
		l.updates, l.stop, l.resnap = nil, nil, true
		return true
	}
	now := time.Now()
	if e == nil {
		return l.snapshotEnd(now)
	}
	for _, c := range l.b.changes(l.v, e, now, l.initial) {
		if !l.send(c) {
			return false
		}
	}
	return true
}

// snapshotEnd reports the records that left while the watch was
// interrupted and, after the first snapshot, Synced; false when the
// watcher is stopping.
func (l *watchLoop[T]) snapshotEnd(now time.Time) bool {
	for _, g := range l.v.end(now) {
		l.b.log.Info("record left the bucket while the watch was interrupted", "bucket", l.b.name, "key", g.key, "as", g.kind.String())
		if !l.send(fleet.Change[T]{Kind: g.kind, Key: g.key}) {
			return false
		}
	}
	if l.initial {
		l.initial = false
		return l.send(fleet.Change[T]{Kind: fleet.Synced, Initial: true})
	}
	return true
}

// changes folds entry e into v and returns the changes to report: none,
// one, or Expired then Put for a record that expired and came back while
// the watcher was not looking.
func (b *Bucket[T]) changes(v *view, e jetstream.KeyValueEntry, now time.Time, initial bool) []fleet.Change[T] {
	en := entry{key: e.Key(), rev: e.Revision(), op: opPut, created: e.Created()}
	switch e.Operation() {
	case jetstream.KeyValuePut:
	case jetstream.KeyValueDelete:
		en.op = opDelete
	default: // purge, including the server's expiry (MaxAge) marker
		en.op = opPurge
	}
	_, wasLive := v.live[en.key]
	missed := v.snapshotting() && !initial && !wasLive
	kind, lapsed, outage := v.observe(en, now)
	if kind == 0 {
		return nil
	}
	c := fleet.Change[T]{Kind: kind, Key: en.key, Initial: initial && kind == fleet.Put}
	if kind != fleet.Put {
		return []fleet.Change[T]{c}
	}
	var out []fleet.Change[T]
	switch {
	case outage:
		b.log.Info("record lapsed and was put again during this watcher's NATS outage", "bucket", b.name, "key", en.key, "revision", en.rev)
		c.Lapsed = true
	case lapsed:
		b.log.Info("record expired and was put again while the watch was interrupted", "bucket", b.name, "key", en.key, "revision", en.rev)
		out = append(out, fleet.Change[T]{Kind: fleet.Expired, Key: en.key})
	}
	if err := json.Unmarshal(e.Value(), &c.Value); err != nil {
		v.forget(en.key, en.rev)
		return append(out, fleet.Change[T]{Kind: fleet.Invalid, Key: en.key, Initial: c.Initial, Err: fmt.Errorf("decoding %s/%s: %w", b.name, en.key, err)})
	}
	if missed {
		b.log.Info("record missed while the watch was interrupted", "bucket", b.name, "key", en.key, "revision", en.rev)
	}
	return append(out, c)
}

// reconnects counts the connection's reconnect attempts (0 without a
// connection).
func (b *Bucket[T]) reconnects() uint64 {
	if b.nc == nil {
		return 0
	}
	return b.nc.Stats().Reconnects
}

// connected reports whether the connection is up (true without one).
func (b *Bucket[T]) connected() bool { return b.nc == nil || b.nc.IsConnected() }
