package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// SnapshotObject is the object name of the index snapshot in the bucket.
const SnapshotObject = "radix-state"

// Snapshotter is what the durable consumer needs from the router's index
// to write a snapshot: Flush applies every write queued so far, Dump
// returns the exact state. liveindex.Index satisfies it. Events, those of
// a restored snapshot included, never go to it: they go to the router's
// applier (recovery.Applier), like every transport's.
type Snapshotter interface {
	Flush() error
	Dump() []kvevent.Event
}

// Config configures a Consumer.
type Config struct {
	// Namespace and Component name the subject and stream. Defaults
	// "dynamo" and "backend".
	Namespace, Component string
	// RouterID names this router's durable consumer; required and stable
	// across restarts.
	RouterID string
	// SnapshotThreshold: when the stream holds more messages than this,
	// snapshot the index and purge what every consumer acknowledged
	// (--router-snapshot-threshold). Default 10000.
	SnapshotThreshold uint64
	// SnapshotInterval is how often the stream size is checked. Default 1 s.
	SnapshotInterval time.Duration
	// Bucket is the Object Store bucket of snapshots. Default
	// "kvrouter-radix-state".
	Bucket string
	// ResetStates purges the stream and deletes the snapshot at start
	// (--router-reset-states; unsafe while other routers run). Default false.
	ResetStates bool
	// MaxAge is the stream's message retention. Default 1 h.
	MaxAge time.Duration
	// Replicas is how many copies of the stream and of the snapshot
	// bucket a NATS cluster keeps (natsbus.Config.Replicas; 0 means 1).
	// Default 1.
	Replicas int
	// FetchBatch is how many messages one pull asks for. Default 256.
	FetchBatch int
	// Recovery tunes the repair of gaps, duplicates and publisher restarts
	// through the workers' local indexers (queries over NATS, as in the
	// non-durable mode). Default recovery.DefaultConfig().
	Recovery recovery.Config
}

// DefaultConfig returns the defaults documented on the fields.
func DefaultConfig() Config {
	return Config{Namespace: dynamo.DefaultNamespace, Component: dynamo.DefaultComponent, SnapshotThreshold: 10000,
		SnapshotInterval: time.Second, Bucket: "kvrouter-radix-state", MaxAge: time.Hour, Replicas: 1, FetchBatch: 256,
		Recovery: recovery.DefaultConfig()}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Namespace == "" || c.Component == "" || c.Bucket == "":
		return errors.New("durable: namespace, component and bucket are required")
	case c.RouterID == "":
		return errors.New("durable: router id is required")
	case c.SnapshotInterval <= 0 || c.MaxAge <= 0 || c.FetchBatch <= 0:
		return errors.New("durable: snapshot interval, max age and fetch batch must be positive")
	case c.Replicas < 0:
		return fmt.Errorf("durable: replicas %d below 0", c.Replicas)
	}
	if err := c.Recovery.Validate(); err != nil {
		return fmt.Errorf("durable: %w", err)
	}
	return nil
}

// EnsureStream creates (or updates) the stream capturing the events
// subject, with replicas copies on a NATS cluster (0 means 1; an existing
// stream with another count is rescaled); workers call it in durable mode
// so that their publishes are kept.
//
// A stream that already has this configuration is left alone rather than
// updated: every router and worker calls this at start, and a stream
// update racing another router's consumer creation trips a data race
// inside nats-server v2.15.2 (fileStore.UpdateConfig against
// ConsumerStore, seen under -race in the chaos suite).
func EnsureStream(ctx context.Context, js jetstream.JetStream, namespace, component string, maxAge time.Duration, replicas int) (jetstream.Stream, error) {
	want := jetstream.StreamConfig{Name: dynamo.StreamName(namespace, component),
		Subjects: []string{dynamo.Subject(namespace, component)}, MaxAge: maxAge, Storage: jetstream.FileStorage,
		Replicas: max(replicas, 1)}
	if s, err := js.Stream(ctx, want.Name); err == nil {
		if have := s.CachedInfo().Config; sameStream(have, want) {
			return s, nil
		}
	}
	s, err := js.CreateOrUpdateStream(ctx, want)
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", want.Name, err)
	}
	return s, nil
}

// sameStream reports whether an existing stream already has the settings
// EnsureStream asks for.
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.MaxAge == want.MaxAge &&
		have.Storage == want.Storage && max(have.Replicas, 1) == want.Replicas
}

// Consumer is one router's durable reader of the stream. Events read from
// the stream go through a recovery.Tracker, one recovery.Stream per worker
// rank, exactly as on the non-durable NATS plane: duplicates are dropped,
// a gap in a rank's event ids (an event the worker failed to publish, or
// lost before it reached the stream) is repaired from the worker's local
// indexer (a range, or a dump that clears the rank and replays), and a
// restarted publisher (a new publisher id, ids starting over, a TooNew
// answer) has its rank cleared and re-synced with a dump. Publishers
// without a local indexer (no responder) have their events applied as
// they come, gaps skipped.
//
// Wiring (in the service): New, Start, then feed every directory
// notification to Notify; Close at shutdown.
type Consumer struct {
	cfg     Config
	js      jetstream.JetStream
	a       recovery.Applier
	snap    Snapshotter
	log     *slog.Logger
	m       *metrics
	tracker *recovery.Tracker
	stream  jetstream.Stream
	cons    jetstream.Consumer
	store   jetstream.ObjectStore
	cancel  context.CancelFunc
	done    chan struct{}
	// restored is set once a snapshot was applied: a Start retried after
	// a later step failed must not apply another one on top.
	restored bool

	// mu orders handle (an event fed to the tracker, then its stream
	// sequence recorded) against snapshots.
	mu  sync.Mutex
	seq uint64

	// testHook, set by tests only, is called after each step of Start.
	testHook func(startStep)
}

// startStep names a step of Start, for testHook.
type startStep int

const (
	stepDeleted  startStep = iota // the old consumer deleted
	stepCreated                   // the new consumer created
	stepRestored                  // the snapshot restored (or none found)
)

func (c *Consumer) hook(s startStep) {
	if c.testHook != nil {
		c.testHook(s)
	}
}

// counted is the tracker's Applier: the router's applier, counted.
type counted struct{ c *Consumer }

var _ recovery.Applier = counted{}

func (a counted) ApplyEvent(ev kvevent.Event) error {
	a.c.m.applied.Inc()
	return a.c.a.ApplyEvent(ev)
}

// New returns a consumer handing every event (stream, recovery answers,
// restored snapshot) to a, and reading snap for its own snapshots;
// recovery queries go over js.Conn(). onState (may be nil) hears every worker's recovery state:
// DEGRADED while a gap, restart or restore query of one of its ranks is
// outstanding or its last recovery failed, EXACT otherwise. reg nil:
// metrics not exported; log may be nil.
func New(cfg Config, js jetstream.JetStream, a recovery.Applier, snap Snapshotter, onState recovery.StateFunc, reg *prometheus.Registry, log *slog.Logger) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if a == nil || snap == nil {
		return nil, errors.New("durable: an applier and a snapshotter are required")
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	rm, err := recovery.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("event plane metrics: %w", err)
	}
	c := &Consumer{cfg: cfg, js: js, a: a, snap: snap, log: log, m: m}
	q := natsevents.NewQuerier(js.Conn(), cfg.Namespace, cfg.Component)
	if c.tracker, err = recovery.NewTracker(cfg.Recovery, q, counted{c}, onState, rm, log); err != nil {
		return nil, err
	}
	return c, nil
}

// Start resets the state if asked, (re)creates the durable consumer from
// the stream's first message, restores the snapshot (the messages it
// covers are then skipped) and starts consuming. It returns once the
// snapshot is applied; each restored worker rank is then asked for the
// events after its snapshot position (what it published that never reached
// the stream, or a dump if it restarted meanwhile). A Start that failed may
// be called again (the snapshot is applied once).
func (c *Consumer) Start(ctx context.Context) error {
	var err error
	if c.stream, err = EnsureStream(ctx, c.js, c.cfg.Namespace, c.cfg.Component, c.cfg.MaxAge, c.cfg.Replicas); err != nil {
		return err
	}
	if c.cfg.ResetStates {
		if err := c.stream.Purge(ctx); err != nil {
			return fmt.Errorf("purging the stream: %w", err)
		}
		if err := c.js.DeleteObjectStore(ctx, c.cfg.Bucket); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) &&
			!errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("deleting the snapshot bucket: %w", err)
		}
		c.log.Warn("durable events: states reset (stream purged, snapshot deleted)")
	}
	if c.store, err = c.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: c.cfg.Bucket, Replicas: max(c.cfg.Replicas, 1)}); err != nil {
		return fmt.Errorf("opening snapshot bucket: %w", err)
	}
	// The old consumer cannot be moved to another start, so it is
	// replaced by one reading from the stream's first message. Its ack
	// floor (the message before that one) holds back every purge from
	// then on; the snapshot is read only after that, and a purge never
	// passes the snapshot its writer stored first, so the snapshot covers
	// everything before the first message and the stream holds all that
	// follows it. Restoring first and then creating a consumer after the
	// snapshot left a window in which another router could snapshot and
	// purge the messages this one was about to read.
	if err := c.stream.DeleteConsumer(ctx, c.cfg.RouterID); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("deleting the old consumer: %w", err)
	}
	c.hook(stepDeleted)
	cc := jetstream.ConsumerConfig{Durable: c.cfg.RouterID, AckPolicy: jetstream.AckAllPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		InactiveThreshold: time.Hour}
	if c.cons, err = c.stream.CreateOrUpdateConsumer(ctx, cc); err != nil {
		return fmt.Errorf("creating durable consumer %s: %w", c.cfg.RouterID, err)
	}
	c.hook(stepCreated)
	if !c.cfg.ResetStates && !c.restored {
		if err := c.restore(ctx); err != nil {
			c.log.Warn("durable events: no usable snapshot, starting from the stream", "err", err)
		}
	}
	c.hook(stepRestored)
	rctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	// Read before run starts: from then on c.seq is run's (under c.mu).
	from := c.seq + 1
	go c.run(rctx)
	c.log.Info("durable events: consuming", "stream", dynamo.StreamName(c.cfg.Namespace, c.cfg.Component), "consumer", c.cfg.RouterID,
		"from_seq", from, "first_seq", c.cons.CachedInfo().AckFloor.Stream+1)
	return nil
}

func (c *Consumer) restore(ctx context.Context) error {
	b, err := c.store.GetBytes(ctx, SnapshotObject)
	if err != nil {
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return nil
		}
		return err
	}
	s, err := DecodeSnapshot(b)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range s.Events {
		if err := c.a.ApplyEvent(ev); err != nil {
			c.log.Debug("durable events: snapshot event refused", "err", err)
		}
	}
	c.seq, c.restored = s.StreamSeq, true
	for w, last := range s.Last {
		c.tracker.Resume(w, last, s.Publishers[w])
	}
	c.m.restores.Inc()
	c.log.Info("durable events: restored snapshot", "stream_seq", s.StreamSeq, "events", len(s.Events), "ranks", len(s.Last), "bytes", len(b))
	return nil
}

func (c *Consumer) run(ctx context.Context) {
	defer close(c.done)
	next := time.Now().Add(c.cfg.SnapshotInterval)
	for ctx.Err() == nil {
		batch, err := c.cons.Fetch(c.cfg.FetchBatch, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		var lastMsg jetstream.Msg
		for m := range batch.Messages() {
			c.handle(m)
			lastMsg = m
		}
		if lastMsg != nil {
			_ = lastMsg.Ack()
		}
		if time.Now().After(next) {
			next = time.Now().Add(c.cfg.SnapshotInterval)
			if err := c.maybeSnapshot(ctx, false); err != nil && ctx.Err() == nil {
				c.log.Warn("durable events: snapshot failed", "err", err)
			}
		}
	}
}

func (c *Consumer) handle(m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	c.mu.Lock()
	covered, prev := meta.Sequence.Stream <= c.seq, c.seq
	c.mu.Unlock()
	if covered {
		return // in the restored snapshot, or redelivered
	}
	c.m.received.Inc()
	var pub uint64
	ev, env, err := dynamo.Decode(m.Data())
	if err != nil {
		if ev, err = dynamo.DecodeEventJSON(m.Data()); err != nil {
			c.m.malformed.Inc()
			c.log.Warn("durable events: malformed event", "seq", meta.Sequence.Stream, "err", err)
		}
	} else if env != nil {
		pub = env.PublisherID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev > 0 && meta.Sequence.Stream > prev+1 {
		// Messages after our position left the stream unread (expired by
		// the max age while this router lagged, or purged by a router
		// whose newer snapshot an older one overwrote): each rank's gap repair
		// recovers its lost events from the worker once a later one
		// arrives; this says why it has to.
		c.log.Warn("durable events: stream messages lost before this router read them",
			"after_seq", prev, "next_seq", meta.Sequence.Stream)
	}
	if err == nil {
		c.tracker.Live(ev, pub)
	}
	c.seq = meta.Sequence.Stream
}

// Notify folds a directory notification in: Added (or Updated with new
// ranks) starts following the worker's ranks with a dump (stream events
// the dump already reflects are then dropped as duplicates); Removed drops
// its blocks, as does an Updated record whose events left NATS.
func (c *Consumer) Notify(n fleet.Notification) {
	c.tracker.Follow(n, fleet.EventsNATS)
}

// Workers returns the worker ranks followed.
func (c *Consumer) Workers() []kvevent.WorkerRank { return c.tracker.Workers() }

// Snapshot writes a snapshot now and purges acknowledged messages.
func (c *Consumer) Snapshot(ctx context.Context) error { return c.maybeSnapshot(ctx, true) }

func (c *Consumer) maybeSnapshot(ctx context.Context, force bool) error {
	info, err := c.stream.Info(ctx)
	if err != nil {
		return err
	}
	if !force && info.State.Msgs <= c.cfg.SnapshotThreshold {
		return nil
	}
	var s Snapshot
	c.mu.Lock()
	err = c.tracker.Frozen(ctx, func(pos map[kvevent.WorkerRank]recovery.Position) {
		_ = c.snap.Flush()
		s = Snapshot{StreamSeq: c.seq, Last: make(map[kvevent.WorkerRank]uint64, len(pos)),
			Publishers: make(map[kvevent.WorkerRank]uint64, len(pos)), Events: c.snap.Dump()}
		for w, p := range pos {
			s.Last[w] = p.Last
			if p.Publisher != 0 {
				s.Publishers[w] = p.Publisher
			}
		}
	})
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if s.StreamSeq == 0 {
		return nil
	}
	// Never replace a newer snapshot (another router's).
	if oi, err := c.store.GetInfo(ctx, SnapshotObject); err == nil {
		if seq, err := strconv.ParseUint(oi.Description, 10, 64); err == nil && seq > s.StreamSeq {
			return nil
		}
	}
	b, err := s.Encode()
	if err != nil {
		return err
	}
	if _, err := c.store.Put(ctx, jetstream.ObjectMeta{Name: SnapshotObject, Description: strconv.FormatUint(s.StreamSeq, 10)},
		bytes.NewReader(b)); err != nil {
		return fmt.Errorf("writing snapshot: %w", err)
	}
	c.m.snapshots.Inc()
	// Purge what every consumer has acknowledged, up to the snapshot.
	upTo := s.StreamSeq
	lister := c.stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		upTo = min(upTo, ci.AckFloor.Stream)
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("listing consumers: %w", err)
	}
	if upTo > 0 {
		if err := c.stream.Purge(ctx, jetstream.WithPurgeSequence(upTo+1)); err != nil {
			return fmt.Errorf("purging: %w", err)
		}
		c.m.purges.Inc()
	}
	c.log.Info("durable events: snapshot written", "stream_seq", s.StreamSeq, "events", len(s.Events), "bytes", len(b),
		"purged_below", upTo+1, "stream_msgs_before", info.State.Msgs)
	return nil
}

// Close stops consuming and every recovery (the durable consumer stays for
// the next start).
func (c *Consumer) Close() {
	if c.cancel != nil {
		c.cancel()
		<-c.done
	}
	c.tracker.Close()
}

type metrics struct {
	received, applied, malformed, snapshots, purges, restores prometheus.Counter
}

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	mk := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_durable_" + name, Help: help})
	}
	m := &metrics{
		received:  mk("events_received_total", "KV events read from the JetStream stream."),
		applied:   mk("events_applied_total", "KV events applied to the index (from the stream or a recovery answer)."),
		malformed: mk("malformed_total", "Stream messages that could not be decoded."),
		snapshots: mk("snapshots_total", "Index snapshots written to the object store."),
		purges:    mk("purges_total", "Stream purges after a snapshot."),
		restores:  mk("restores_total", "Snapshots restored at start."),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.received, m.applied, m.malformed, m.snapshots, m.purges, m.restores} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
