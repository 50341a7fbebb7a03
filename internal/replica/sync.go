package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// Record is a replica's announcement in the replica bucket, kept alive by
// its heartbeat.
type Record struct {
	// RouterID is the replica's router id (also the record's key).
	RouterID uint64 `json:"router_id"`
	// StartedAt is when the replica started.
	StartedAt time.Time `json:"started_at"`
}

// Sync shares one router's bookings with its replicas over NATS: the
// network edge around a Core. Create it with New, then Start; Close ends
// it (deregistering, so peers free this router's bookings at once).
type Sync struct {
	cfg   Config
	bus   *natsbus.Bus
	r     Target
	log   *slog.Logger
	core  *Core
	clock func() time.Time           // Config.Clock
	hb    *registry.HeartbeatMetrics // counts the membership lease's failed heartbeats; nil without a registry

	q                                    chan Event
	published, dropped, pubErrs, badMsgs atomic.Uint64
	resyncs                              map[string]*atomic.Uint64 // by reason
	resyncFails                          atomic.Uint64

	ctx    context.Context // cancelled by teardown: ends snapshot fetches
	cancel context.CancelFunc

	pmu     sync.Mutex
	pending map[uint64]resyncReq // peers whose snapshot is to be fetched
	kick    chan struct{}
	unhook  func() // removes the reconnect hook

	mu       sync.Mutex
	started  bool
	closed   bool
	subs     []*nats.Subscription
	lease    *registry.Lease[Record]
	watcher  *registry.Watcher[Record]
	stop     chan struct{}
	wg       sync.WaitGroup
	snapshot time.Duration // how long the start-up snapshot took
}

// New builds replica sync for r over bus and attaches it to r as its
// lifecycle observer: one router, or every model pool of a *router.Pools
// (each event then names its pool; see docs/architecture.md). r's RouterID must be unique among the replicas (and
// not 0). Metrics go to reg when it is not nil; log may be nil.
func New(cfg Config, bus *natsbus.Bus, r Target, reg *prometheus.Registry, log *slog.Logger) (*Sync, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if bus == nil || r == nil {
		return nil, fmt.Errorf("%w: bus and router are required", ErrConfig)
	}
	if r.Config().RouterID == 0 {
		return nil, fmt.Errorf("%w: router id 0 (give each replica a unique id)", ErrConfig)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sync{cfg: cfg, bus: bus, r: r, log: log.With("router_id", r.Config().RouterID), clock: cfg.Clock,
		q: make(chan Event, cfg.QueueSize), stop: make(chan struct{}),
		resyncs: map[string]*atomic.Uint64{}, pending: map[uint64]resyncReq{}, kick: make(chan struct{}, 1)}
	if s.clock == nil {
		s.clock = time.Now
	}
	for _, why := range resyncReasons {
		s.resyncs[why] = new(atomic.Uint64)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// The epoch is an incarnation number, not a time the core reasons
	// with: the wall clock, so that it grows across restarts whatever
	// Config.Clock says.
	s.core = NewCore(r, CoreConfig{Shadows: cfg.Shadows, ShadowTTL: cfg.ShadowTTL, Epoch: uint64(time.Now().UnixNano())}, s.enqueue)
	if reg != nil {
		err := s.register(reg)
		if err == nil {
			s.hb, err = registry.NewHeartbeatMetrics(reg)
		}
		if err != nil {
			s.core.Detach()
			s.cancel()
			return nil, err
		}
	}
	return s, nil
}

// Core returns the network-free part (peers, snapshot, counters).
func (s *Sync) Core() *Core { return s.core }

// enqueue is the router observer's sink: never blocks.
func (s *Sync) enqueue(ev Event) {
	select {
	case s.q <- ev:
	default:
		s.dropped.Add(1)
	}
}

// Start subscribes to peers' events, announces this replica, learns the
// live peers and fetches their bookings (all peers at once, each within
// SnapshotTimeout; a peer that does not answer is logged and retried in
// the background), then starts publishing and the resync loop (snapshots
// fetched again on reconnect, on a hole in a peer's events, on a peer's
// claim and every ResyncInterval; see doc.go). It returns once the
// start-up snapshots are applied.
func (s *Sync) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.closed {
		return errors.New("replica sync: already started or closed")
	}
	s.started = true
	nc := s.bus.Conn()
	self := s.core.RouterID()
	fail := func(err error) error {
		_ = s.teardownLocked(context.Background(), false)
		return err
	}
	var bucket *registry.Bucket[Record]
	err := retryJS(ctx, func(ctx context.Context) (err error) {
		bucket, err = registry.OpenReplicatedBucket[Record](ctx, s.bus.JetStream(), s.cfg.Bucket, s.cfg.TTL, s.cfg.Replicas, s.log)
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("replica sync: %w", err))
	}
	bucket.CountHeartbeats(s.hb)
	sub, err := nc.Subscribe(EventsSubject(s.cfg.Namespace, s.cfg.Component), s.onEvent)
	if err != nil {
		return fail(fmt.Errorf("replica sync: subscribing to events: %w", err))
	}
	s.subs = append(s.subs, sub)
	sub, err = nc.Subscribe(SnapshotSubject(s.cfg.Namespace, s.cfg.Component, self), s.onSnapshotRequest)
	if err != nil {
		return fail(fmt.Errorf("replica sync: subscribing to snapshot requests: %w", err))
	}
	s.subs = append(s.subs, sub)
	if err := nc.FlushWithContext(ctx); err != nil {
		return fail(fmt.Errorf("replica sync: flushing subscriptions: %w", err))
	}
	if s.watcher, err = bucket.Watch(context.Background()); err != nil {
		return fail(fmt.Errorf("replica sync: %w", err))
	}
	var peers []uint64
	for synced := false; !synced; {
		select {
		case c, ok := <-s.watcher.C():
			if !ok {
				return fail(errors.New("replica sync: replica watch ended"))
			}
			switch c.Kind {
			case fleet.Synced:
				synced = true
			case fleet.Put:
				if id, err := strconv.ParseUint(c.Key, 10, 64); err == nil && id != self {
					peers = append(peers, id)
					s.core.PeerUp(id)
				}
			}
		case <-ctx.Done():
			return fail(fmt.Errorf("replica sync: listing replicas: %w", ctx.Err()))
		}
	}
	rec := Record{RouterID: self, StartedAt: s.clock().UTC()}
	err = retryJS(ctx, func(ctx context.Context) (err error) {
		s.lease, err = bucket.Keep(ctx, RecordKey(self), rec)
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("replica sync: announcing: %w", err))
	}
	s.lease.RefreshOnReconnect(s.bus.OnReconnect)

	begin := time.Now() // a measured latency: real time
	var fetches sync.WaitGroup
	for _, p := range peers {
		fetches.Go(func() {
			s.core.BeginResync(p)
			defer s.core.EndResync(p)
			snap, err := s.fetchSnapshot(ctx, p)
			if err != nil {
				s.log.Warn("replica snapshot failed; will retry", "peer", p, "err", err)
				s.flag(p, reasonRetry)
				return
			}
			n, _, again := s.core.ApplySnapshot(snap)
			if again {
				s.flag(p, reasonRetry)
			}
			s.log.Info("replica snapshot applied", "peer", p, "bookings", n)
		})
	}
	fetches.Wait()
	s.snapshot = time.Since(begin)
	s.unhook = s.bus.OnReconnect(func() { s.flagAll(reasonReconnect) })

	s.wg.Add(3)
	go s.follow()
	go s.publish()
	go s.resyncLoop()
	return nil
}

// jsAttempt bounds one JetStream call made by Start, and jsPause separates
// attempts: a reply lost in a NATS server restart (or JetStream not ready
// yet after one) must not hold start-up until its context ends.
const (
	jsAttempt = 2 * time.Second
	jsPause   = 100 * time.Millisecond
)

// retryJS calls f with a context bounded by jsAttempt until it succeeds or
// ctx ends; it returns f's last error then.
func retryJS(ctx context.Context, f func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, jsAttempt)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(jsPause):
		}
	}
}

// fetchSnapshot asks peer for its bookings (the request carries this
// router's stream position, see Core.Claim) and collects the reply chunks.
func (s *Sync) fetchSnapshot(ctx context.Context, peer uint64) (Snapshot, error) {
	snap := Snapshot{RouterID: peer}
	nc := s.bus.Conn()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return snap, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	epoch, seq := s.core.Position()
	req, _ := AppendChunk(nil, Chunk{RouterID: s.core.RouterID(), Epoch: epoch, Seq: seq, Last: true})
	if err := nc.PublishRequest(SnapshotSubject(s.cfg.Namespace, s.cfg.Component, peer), inbox, req); err != nil {
		return snap, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SnapshotTimeout)
	defer cancel()
	for first := true; ; first = false {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return snap, fmt.Errorf("waiting for snapshot of %d: %w", peer, err)
		}
		c, err := DecodeChunk(m.Data)
		if err == nil && c.RouterID != peer {
			err = fmt.Errorf("%w: snapshot of %d answered by %d", ErrMalformed, peer, c.RouterID)
		}
		if err == nil && !first && (c.Epoch != snap.Epoch || c.Seq != snap.Seq) {
			err = fmt.Errorf("%w: snapshot chunks of %d at different positions", ErrMalformed, peer)
		}
		if err != nil {
			s.badMsgs.Add(1)
			return snap, err
		}
		snap.Epoch, snap.Seq = c.Epoch, c.Seq
		snap.Events = append(snap.Events, c.Events...)
		if c.Last {
			return snap, nil
		}
	}
}

func (s *Sync) onEvent(m *nats.Msg) {
	ev, err := DecodeEvent(m.Data)
	if err != nil {
		s.badMsgs.Add(1)
		s.log.Debug("dropping malformed lifecycle event", "err", err)
		return
	}
	if s.core.Receive(ev) {
		s.flag(ev.RouterID, reasonGap)
	}
}

func (s *Sync) onSnapshotRequest(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	if req, err := DecodeChunk(m.Data); err == nil {
		s.core.Claim(req.RouterID, req.Epoch, req.Seq, s.clock())
	}
	snap := s.core.Snapshot()
	evs, self := snap.Events, snap.RouterID
	nc := s.bus.Conn()
	for i := 0; ; i += s.cfg.ChunkEvents {
		j := min(i+s.cfg.ChunkEvents, len(evs))
		data, err := AppendChunk(nil, Chunk{RouterID: self, Epoch: snap.Epoch, Seq: snap.Seq, Last: j == len(evs), Events: evs[i:j]})
		if err == nil {
			err = nc.Publish(m.Reply, data)
		}
		if err != nil {
			s.log.Warn("answering snapshot request", "err", err)
			return
		}
		if j == len(evs) {
			return
		}
	}
}

// follow applies replica arrivals and departures.
func (s *Sync) follow() {
	defer s.wg.Done()
	self := s.core.RouterID()
	for c := range s.watcher.C() {
		id, err := strconv.ParseUint(c.Key, 10, 64)
		if err != nil || id == self {
			continue
		}
		switch c.Kind {
		case fleet.Put:
			// Heartbeats are Puts too: only a peer that was not live
			// needs its snapshot (events that beat its record here were
			// refused).
			joined := !s.core.Member(id)
			if s.core.PeerUp(id) {
				s.flag(id, reasonReturned)
			} else if joined {
				s.flag(id, reasonJoined)
			}
		case fleet.Deleted, fleet.Expired:
			n := s.core.PeerDown(id, s.clock())
			s.log.Info("replica left; freed its bookings", "peer", id, "how", c.Kind, "bookings", n)
		}
	}
}

// publish sends queued events and ticks the shadows until stop, then
// drains what is queued.
func (s *Sync) publish() {
	defer s.wg.Done()
	nc := s.bus.Conn()
	subject := EventsSubject(s.cfg.Namespace, s.cfg.Component)
	period := s.cfg.ShadowTTL
	if !s.cfg.Shadows {
		period = time.Second
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	prune := time.NewTicker(s.cfg.TTL)
	defer prune.Stop()
	lost := time.NewTicker(time.Second)
	defer lost.Stop()
	var buf []byte
	send := func(ev Event) {
		var err error
		if buf, err = AppendEvent(buf[:0], ev); err == nil {
			// Publish copies the payload into the connection's buffer.
			err = nc.Publish(subject, buf)
		}
		if err != nil {
			s.pubErrs.Add(1)
			return
		}
		s.published.Add(1)
	}
	for {
		select {
		case ev := <-s.q:
			send(ev)
		case <-tick.C:
			s.core.Tick(s.clock())
		case <-prune.C:
			s.core.Prune()
		case <-lost.C:
			s.core.DropLost()
		case <-s.stop:
			for {
				select {
				case ev := <-s.q:
					send(ev)
				default:
					_ = nc.Flush()
					return
				}
			}
		}
	}
}

// Close stops sharing: pending events are flushed, the replica record is
// deleted (peers free this router's bookings right away) and the router's
// observer is detached. Safe to call more than once.
func (s *Sync) Close(ctx context.Context) error {
	return s.teardown(ctx, true)
}

// teardown stops everything; deregister false leaves the record to expire,
// as a crash would.
func (s *Sync) teardown(ctx context.Context, deregister bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.teardownLocked(ctx, deregister)
}

func (s *Sync) teardownLocked(ctx context.Context, deregister bool) error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.core.Detach()
	if s.unhook != nil {
		s.unhook()
	}
	s.cancel()
	close(s.stop)
	if s.watcher != nil {
		s.watcher.Stop()
	}
	s.wg.Wait()
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	var err error
	if s.lease != nil {
		if deregister {
			err = s.lease.Close(ctx)
		} else {
			s.lease.Abandon()
		}
	}
	return err
}
