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
	// The watch being opened, if any: it runs beside the loop so that
	// expiries are reported on time while JetStream is slow to answer.
	var opening chan opened
	defer close(w.done)
	defer close(w.c)
	defer func() {
		if stop != nil {
			stop()
		}
		if opening != nil { // ctx is done: it returns at once
			if o := <-opening; o.err == nil {
				o.stop()
			}
		}
	}()
	v := newView(b.ttl)
	v.begin()
	initial := true // the first snapshot is the initial values
	updates := kw.Updates()
	// The watch is re-created (a fresh snapshot of the bucket, compared
	// with what was reported) after a reconnect: a KV watch is a
	// JetStream consumer that does not survive a server restart, and
	// whatever happened while the connection was down went by unseen. The
	// reconnect counter counts attempts, so the watch waits until the
	// connection is up.
	reconnects := b.reconnects()
	resnap := false
	lastSnap := time.Now()
	failures := 0
	tick := time.NewTicker(max(b.ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	prevTick := time.Now()
	send := func(c fleet.Change[T]) bool {
		select {
		case w.c <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			sinceTick := now.Sub(prevTick)
			prevTick = now
			if n := b.reconnects(); n != reconnects {
				reconnects, resnap = n, true
			}
			if cfg.resync > 0 && now.Sub(lastSnap) >= cfg.resync {
				resnap = true
			}
			if resnap && opening == nil && b.connected() {
				opening = make(chan opened, 1)
				go func(out chan<- opened) {
					kw, stop, err := b.openWatch(ctx)
					out <- opened{kw: kw, stop: stop, err: err}
				}(opening)
			}
			if !b.connected() {
				// Disconnected, the watcher hears no heartbeats: that
				// silence is this router's outage, not its workers'. The
				// deadlines are held a TTL ahead (a fleet is not dropped
				// for a NATS blip), and after the reconnect the re-read
				// reports what really left; a record that expired and
				// came back meanwhile is still told Expired, then Put.
				v.hold(now, sinceTick)
				continue
			}
			for _, k := range v.expire(now) {
				if !send(fleet.Change[T]{Kind: fleet.Expired, Key: k}) {
					return
				}
			}
		case o := <-opening:
			opening = nil
			if o.err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				lvl := b.log.Debug
				if failures == 1 {
					lvl = b.log.Warn
				}
				lvl("re-reading the bucket failed; retrying", "bucket", b.name, "attempt", failures, "err", o.err)
				continue
			}
			if stop != nil {
				stop()
			}
			stop, updates = o.stop, o.kw.Updates()
			v.begin()
			resnap, lastSnap, failures = false, time.Now(), 0
		case e, ok := <-updates:
			if !ok {
				// The library gave the watch up (its consumer could not be
				// re-created): start a new one.
				b.log.Warn("bucket watch closed by the client library; re-watching", "bucket", b.name)
				stop()
				updates, stop, resnap = nil, nil, true
				continue
			}
			now := time.Now()
			if e == nil { // end of the snapshot
				for _, g := range v.end(now) {
					b.log.Info("record left the bucket while the watch was interrupted", "bucket", b.name, "key", g.key, "as", g.kind.String())
					if !send(fleet.Change[T]{Kind: g.kind, Key: g.key}) {
						return
					}
				}
				if initial {
					initial = false
					if !send(fleet.Change[T]{Kind: fleet.Synced, Initial: true}) {
						return
					}
				}
				continue
			}
			for _, c := range b.changes(v, e, now, initial) {
				if !send(c) {
					return
				}
			}
		}
	}
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
