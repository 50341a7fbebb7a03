package discovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinTTL is the shortest record TTL a bucket accepts (NATS keeps expiry
// markers for at least a second).
const MinTTL = time.Second

// Bucket is a NATS KV bucket of JSON records of type T keyed by id, each
// kept alive by its owner's heartbeat: a record not re-put within the
// bucket's TTL expires. Workers register in one; router replicas can
// register in another.
type Bucket[T any] struct {
	kv   jetstream.KeyValue
	nc   *nats.Conn // to notice reconnects (a watch does not survive a server restart)
	name string
	ttl  time.Duration
	log  *slog.Logger
}

// openTimeout bounds OpenBucket when its context has no deadline.
var openTimeout = 10 * time.Second

// OpenBucket creates or opens the KV bucket name with record TTL ttl
// (at least MinTTL). Expiry is announced to watchers by the server (delete
// markers, NATS ≥ 2.11) and also detected by the Watcher itself, so older
// servers work too. log may be nil.
func OpenBucket[T any](ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, log *slog.Logger) (*Bucket[T], error) {
	if ttl < MinTTL {
		return nil, fmt.Errorf("bucket %s: ttl %v below %v", name, ttl, MinTTL)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, ok := ctx.Deadline(); !ok {
		// A JetStream API reply lost in a NATS server restart would leave
		// the call waiting for good (a router stuck in start-up).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, openTimeout)
		defer cancel()
	}
	cfg := jetstream.KeyValueConfig{Bucket: name, History: 1, TTL: ttl, LimitMarkerTTL: ttl}
	kv, err := js.CreateOrUpdateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		log.Warn("nats server too old for expiry markers; watchers detect expiry themselves", "bucket", name)
		cfg.LimitMarkerTTL = 0
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("opening kv bucket %s: %w", name, err)
	}
	return &Bucket[T]{kv: kv, nc: js.Conn(), name: name, ttl: ttl, log: log}, nil
}

// TTL returns how long a record lives without a heartbeat.
func (b *Bucket[T]) TTL() time.Duration { return b.ttl }

// Name returns the bucket's name.
func (b *Bucket[T]) Name() string { return b.name }

// Put stores v under key (a heartbeat is just another Put).
func (b *Bucket[T]) Put(ctx context.Context, key string, v T) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s/%s: %w", b.name, key, err)
	}
	if _, err := b.kv.Put(ctx, key, data); err != nil {
		return fmt.Errorf("putting %s/%s: %w", b.name, key, err)
	}
	return nil
}

// Delete removes key; watchers see a Deleted change.
func (b *Bucket[T]) Delete(ctx context.Context, key string) error {
	if err := b.kv.Delete(ctx, key); err != nil {
		return fmt.Errorf("deleting %s/%s: %w", b.name, key, err)
	}
	return nil
}

// Keep puts v under key now and again every TTL/3 until the lease is
// closed. A failed heartbeat is logged and retried at the next tick (the
// connection reconnects by itself). The first put must succeed.
func (b *Bucket[T]) Keep(ctx context.Context, key string, v T) (*Lease[T], error) {
	if err := b.Put(ctx, key, v); err != nil {
		return nil, err
	}
	l := &Lease[T]{b: b, key: key, v: v, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l, nil
}

// Lease keeps one record alive with periodic heartbeats.
type Lease[T any] struct {
	b    *Bucket[T]
	key  string
	mu   sync.Mutex
	v    T
	once sync.Once
	kick chan struct{} // put now (after a reconnect)
	stop chan struct{}
	done chan struct{}

	removeHook func()
}

func (l *Lease[T]) run() {
	defer close(l.done)
	t := time.NewTicker(max(l.b.ttl/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
			t.Reset(max(l.b.ttl/3, 10*time.Millisecond))
			l.beat()
		case <-t.C:
			l.beat()
		}
	}
}

func (l *Lease[T]) beat() {
	l.mu.Lock()
	v := l.v
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.b.ttl/3)
	defer cancel()
	if err := l.b.Put(ctx, l.key, v); err != nil {
		l.b.log.Warn("heartbeat failed", "bucket", l.b.name, "key", l.key, "err", err)
	}
}

// RefreshOnReconnect makes the lease re-put its record as soon as the
// connection comes back, instead of at the next tick: register is called
// once with the hook to run after each reconnect and returns a function
// that unregisters it (natsbus.Bus.OnReconnect has this shape). The hook
// never blocks. It is unregistered when the lease ends. Call it at most
// once.
func (l *Lease[T]) RefreshOnReconnect(register func(hook func()) (remove func())) {
	l.removeHook = register(func() {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	})
}

// Update replaces the record and puts it now.
func (l *Lease[T]) Update(ctx context.Context, v T) error {
	l.mu.Lock()
	l.v = v
	l.mu.Unlock()
	return l.b.Put(ctx, l.key, v)
}

// Refresh re-puts the record now (call it after a reconnect so that the
// record is back before the next tick).
func (l *Lease[T]) Refresh(ctx context.Context) error {
	l.mu.Lock()
	v := l.v
	l.mu.Unlock()
	return l.b.Put(ctx, l.key, v)
}

// Abandon stops the heartbeats and leaves the record to expire, as a
// crashed owner would.
func (l *Lease[T]) Abandon() {
	l.once.Do(func() {
		if l.removeHook != nil {
			l.removeHook()
		}
		close(l.stop)
	})
	<-l.done
}

// Close stops the heartbeats and deletes the record (deregistration).
func (l *Lease[T]) Close(ctx context.Context) error {
	l.Abandon()
	return l.b.Delete(ctx, l.key)
}

// ChangeKind says what happened to a key.
type ChangeKind uint8

// Change kinds.
const (
	// Put: the key was created or updated (Value is set).
	Put ChangeKind = iota + 1
	// Deleted: the owner deleted the key.
	Deleted
	// Expired: the key's heartbeats stopped for longer than the TTL.
	Expired
	// Synced: every value present when the watch started has been
	// delivered; later changes are live.
	Synced
	// Invalid: a value could not be decoded (Err says why); the key is
	// otherwise ignored.
	Invalid
)

var changeNames = [...]string{"", "put", "deleted", "expired", "synced", "invalid"}

// String names the kind.
func (k ChangeKind) String() string {
	if int(k) < len(changeNames) && k != 0 {
		return changeNames[k]
	}
	return fmt.Sprintf("ChangeKind(%d)", uint8(k))
}

// Change is one event of a Watcher.
type Change[T any] struct {
	// Kind says what happened.
	Kind ChangeKind
	// Key is the record's key (empty for Synced).
	Key string
	// Value is the record (Put only).
	Value T
	// Initial is true for values present when the watch started.
	Initial bool
	// Err is the decoding error (Invalid only).
	Err error
}

// Watcher delivers a bucket's changes: first every current value, then
// Synced, then live puts, deletions and expiries.
type Watcher[T any] struct {
	c      chan Change[T]
	cancel context.CancelFunc
	done   chan struct{}
}

// C returns the channel of changes; it is closed when the watcher stops.
func (w *Watcher[T]) C() <-chan Change[T] { return w.c }

// Stop ends the watch and waits for its goroutine.
func (w *Watcher[T]) Stop() {
	w.cancel()
	<-w.done
}

// Watch starts watching every key of the bucket.
func (b *Bucket[T]) Watch(ctx context.Context) (*Watcher[T], error) {
	kw, err := b.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watching %s: %w", b.name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher[T]{c: make(chan Change[T], 64), cancel: cancel, done: make(chan struct{})}
	go b.watch(ctx, kw, w)
	return w, nil
}

func (b *Bucket[T]) watch(ctx context.Context, kw jetstream.KeyWatcher, w *Watcher[T]) {
	defer close(w.done)
	defer close(w.c)
	defer func() { _ = kw.Stop() }()
	// A KV watch is a JetStream consumer that does not survive a NATS
	// server restart: after a reconnect it is re-created, resuming after
	// the last revision seen.
	var lastRev uint64
	reconnects := b.reconnects()
	rewatch := false
	// deadlines tracks live keys and when they expire without a heartbeat.
	deadlines := map[string]time.Time{}
	initial := true
	tick := time.NewTicker(max(b.ttl/4, 10*time.Millisecond))
	defer tick.Stop()
	send := func(c Change[T]) bool {
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
			if n := b.reconnects(); n != reconnects {
				reconnects, rewatch = n, true
			}
			if rewatch {
				var opts []jetstream.WatchOpt
				if lastRev > 0 && !initial {
					// Interrupted during the initial values, the watch starts
					// over: a resumed one never sends their end marker.
					opts = append(opts, jetstream.ResumeFromRevision(lastRev+1))
				}
				if nkw, err := b.kv.WatchAll(ctx, opts...); err != nil {
					b.log.Warn("re-watching the bucket after a reconnect failed; retrying", "bucket", b.name, "err", err)
				} else {
					_ = kw.Stop()
					kw, rewatch = nkw, false
					b.log.Info("re-watching the bucket after a NATS reconnect", "bucket", b.name, "from_revision", lastRev+1)
				}
			}
			for k, d := range deadlines {
				if now.After(d) {
					delete(deadlines, k)
					if !send(Change[T]{Kind: Expired, Key: k}) {
						return
					}
				}
			}
		case e, ok := <-kw.Updates():
			if !ok {
				return
			}
			if e == nil { // end of the initial values
				if !initial {
					continue // a resumed watch caught up
				}
				initial = false
				if !send(Change[T]{Kind: Synced, Initial: true}) {
					return
				}
				continue
			}
			lastRev = max(lastRev, e.Revision())
			c := Change[T]{Key: e.Key(), Initial: initial}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				if err := json.Unmarshal(e.Value(), &c.Value); err != nil {
					c.Kind, c.Err = Invalid, fmt.Errorf("decoding %s/%s: %w", b.name, e.Key(), err)
					delete(deadlines, e.Key())
					break
				}
				c.Kind = Put
				// A value from before the watch started has aged since it
				// was put (server time; clamp clock skew to now).
				start := time.Now()
				if created := e.Created(); initial && created.Before(start) {
					start = created
				}
				deadlines[e.Key()] = start.Add(b.ttl)
			case jetstream.KeyValueDelete:
				c.Kind = Deleted
			default: // purge, including the server's expiry (MaxAge) marker
				c.Kind = Expired
			}
			if c.Kind == Deleted || c.Kind == Expired {
				if _, live := deadlines[e.Key()]; !live {
					continue // already expired here, or never seen
				}
				delete(deadlines, e.Key())
			}
			if !send(c) {
				return
			}
		}
	}
}

// reconnects counts the connection's reconnects (0 without a connection).
func (b *Bucket[T]) reconnects() uint64 {
	if b.nc == nil {
		return 0
	}
	return b.nc.Stats().Reconnects
}
