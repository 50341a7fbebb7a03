package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
	hb   atomic.Pointer[HeartbeatMetrics] // nil: heartbeats are not counted
}

// openTimeout bounds OpenBucket when its context has no deadline.
var openTimeout = 10 * time.Second

// OpenBucket creates or opens the KV bucket name with record TTL ttl
// (at least MinTTL). Expiry is announced to watchers by the server (delete
// markers, NATS ≥ 2.11) and also detected by the Watcher itself, so older
// servers work too. log may be nil.
func OpenBucket[T any](ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, log *slog.Logger) (*Bucket[T], error) {
	return OpenReplicatedBucket[T](ctx, js, name, ttl, 1, log)
}

// OpenReplicatedBucket is OpenBucket with replicas copies of the bucket
// on a NATS cluster (1 on a single server; 0 means 1). Opening an
// existing bucket with another count rescales it.
func OpenReplicatedBucket[T any](ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, replicas int, log *slog.Logger) (*Bucket[T], error) {
	return openBucket[T](ctx, js, name, ttl, replicas, 1, log)
}

// openBucket is OpenReplicatedBucket keeping the last history values of
// each key (1 to 64) instead of only the newest.
func openBucket[T any](ctx context.Context, js jetstream.JetStream, name string, ttl time.Duration, replicas, history int, log *slog.Logger) (*Bucket[T], error) {
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
	cfg := jetstream.KeyValueConfig{Bucket: name, History: uint8(min(max(history, 1), 64)), TTL: ttl, LimitMarkerTTL: ttl, Replicas: max(replicas, 1)}
	if kv, ok := existingBucket(ctx, js, cfg); ok {
		return &Bucket[T]{kv: kv, nc: js.Conn(), name: name, ttl: ttl, log: log}, nil
	}
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

// existingBucket returns the bucket when it already exists with cfg's
// settings (expiry markers included), so that opening it updates
// nothing: every router and worker opens the buckets at start, and a
// stream update racing another client's consumer creation trips a data
// race inside nats-server v2.15.2 (fileStore.UpdateConfig against
// ConsumerStore, seen under -race in the chaos suite).
func existingBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, bool) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		return nil, false
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, false
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.StreamInfo() == nil {
		return nil, false
	}
	have := bs.StreamInfo().Config
	same := bs.History() == int64(cfg.History) && bs.TTL() == cfg.TTL && bs.LimitMarkerTTL() == cfg.LimitMarkerTTL &&
		max(have.Replicas, 1) == cfg.Replicas
	return kv, same
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
// closed. A failed heartbeat is logged and retried soon after, with a
// backoff bounded well under the TTL (TTL/40 doubling up to TTL/10, at
// most 1 s), until a put succeeds; the connection reconnects by itself.
// The first put must succeed.
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
	// prepare, when set, completes or rejects a record given to Update
	// (Registry.Register sets it).
	prepare func(T) (T, error)
}

func (l *Lease[T]) run() {
	defer close(l.done)
	period := max(l.b.ttl/3, 10*time.Millisecond)
	t := time.NewTimer(period)
	defer t.Stop()
	var backoff time.Duration // the wait before the next retry; 0 while heartbeats succeed
	failed := 0               // puts failed in a row
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		case <-t.C:
		}
		if l.beat(failed) {
			failed, backoff = 0, 0
			t.Reset(period)
			continue
		}
		failed++
		backoff = nextRetry(backoff, l.b.ttl)
		t.Reset(backoff)
	}
}

// Heartbeat retry bounds: after a failed put the lease retries after
// TTL/40 (at most retryFirstMax), doubling up to TTL/10 (at most
// retryMaxWait), until a put succeeds; then it is back to one put every
// TTL/3. Waiting for the next tick instead lost registrations on a NATS
// cluster: a JetStream leader election (4–9 s after a node crash) could
// swallow every tick of a 10 s TTL.
const (
	retryFirstMax = 250 * time.Millisecond
	retryMaxWait  = time.Second
	// beatTimeoutMax bounds one put: a reply lost in a leader crash
	// would otherwise hold the lease for TTL/3, a third of what is left.
	beatTimeoutMax = 2 * time.Second
)

// nextRetry is the wait before the retry that follows one after prev (0:
// the first retry after a success) for a record of ttl.
func nextRetry(prev, ttl time.Duration) time.Duration {
	limit := max(min(ttl/10, retryMaxWait), time.Millisecond)
	if prev <= 0 {
		return max(min(ttl/40, retryFirstMax, limit), time.Millisecond)
	}
	return min(2*prev, limit)
}

// beat puts the record once, after failed puts that failed in a row
// (logged at the first failure and at the recovery, counted each time).
// It reports whether the put succeeded.
func (l *Lease[T]) beat(failed int) bool {
	l.mu.Lock()
	v := l.v
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), min(l.b.ttl/3, beatTimeoutMax))
	defer cancel()
	hb := l.b.hb.Load()
	if failed > 0 {
		hb.retried(l.b.name)
	}
	if err := l.b.Put(ctx, l.key, v); err != nil {
		hb.failed(l.b.name)
		lvl := slog.LevelDebug
		if failed == 0 {
			lvl = slog.LevelWarn
		}
		l.b.log.Log(context.Background(), lvl, "heartbeat failed; retrying", "bucket", l.b.name, "key", l.key, "failed_in_a_row", failed+1, "err", err)
		return false
	}
	if failed > 0 {
		l.b.log.Info("heartbeat put again", "bucket", l.b.name, "key", l.key, "failed_before", failed)
	}
	return true
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
	if l.prepare != nil {
		var err error
		if v, err = l.prepare(v); err != nil {
			return err
		}
	}
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
