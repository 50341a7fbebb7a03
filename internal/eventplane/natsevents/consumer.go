package natsevents

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Namespace and Component name the subjects. Defaults "dynamo" and
	// "backend".
	Namespace, Component string
	// Recovery tunes queries, retries and buffering.
	Recovery recovery.Config
}

// DefaultConsumerConfig returns the defaults documented on the fields.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{Namespace: dynamo.DefaultNamespace, Component: dynamo.DefaultComponent, Recovery: recovery.DefaultConfig()}
}

// Validate checks the configuration.
func (c ConsumerConfig) Validate() error {
	if c.Namespace == "" || c.Component == "" {
		return errors.New("natsevents: namespace and component are required")
	}
	return c.Recovery.Validate()
}

// Consumer is a router's end of the NATS event plane: it subscribes to the
// events subject, follows every worker rank with a recovery.Tracker and
// applies events to the router's index.
//
// Wiring (in the service): NewConsumer, Start, then feed every directory
// notification to Notify, and call Reconnected from the bus's OnReconnect
// hook; Close at shutdown.
type Consumer struct {
	cfg     ConsumerConfig
	conn    *nats.Conn
	tracker *recovery.Tracker
	m       *recovery.Metrics
	recv    prometheus.Counter
	log     *slog.Logger

	mu     sync.Mutex
	sub    *nats.Subscription
	closed bool           // Close has begun: Reconnected starts nothing more
	wg     sync.WaitGroup // Reconnected's resyncs; Add under mu while !closed
}

// NewConsumer returns a consumer applying to a. onState (may be nil) hears
// worker state changes; metrics go on reg (nil: not exported); log may be
// nil.
func NewConsumer(cfg ConsumerConfig, conn *nats.Conn, a recovery.Applier, onState recovery.StateFunc, reg *prometheus.Registry, log *slog.Logger) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	m, err := recovery.NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("event plane metrics: %w", err)
	}
	t, err := recovery.NewTracker(cfg.Recovery, NewQuerier(conn, cfg.Namespace, cfg.Component), a, onState, m, log)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, conn: conn, tracker: t, m: m, recv: m.Received("nats"), log: log}, nil
}

// Start subscribes to the events subject. Call it before feeding Added
// notifications, so that nothing published after a dump is missed.
func (c *Consumer) Start() error {
	subj := dynamo.Subject(c.cfg.Namespace, c.cfg.Component)
	sub, err := c.conn.Subscribe(subj, c.handle)
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", subj, err)
	}
	_ = sub.SetPendingLimits(1<<20, 256<<20)
	c.mu.Lock()
	c.sub = sub
	c.mu.Unlock()
	if err := c.conn.Flush(); err != nil {
		return fmt.Errorf("subscribing to %s: %w", subj, err)
	}
	c.log.Info("event plane: following KV events", "subject", subj)
	return nil
}

func (c *Consumer) handle(m *nats.Msg) {
	c.recv.Inc()
	ev, env, err := dynamo.Decode(m.Data)
	if err != nil {
		c.m.Malformed()
		c.log.Warn("event plane: malformed event", "subject", m.Subject, "bytes", len(m.Data), "err", err)
		return
	}
	var pub uint64
	if env != nil {
		pub = env.PublisherID
	}
	c.tracker.Live(ev, pub)
}

// Notify folds a directory notification in: Added (or Updated with new
// ranks) starts following the worker's ranks with a dump; Removed drops
// its blocks, as does an Updated record whose events left NATS. Workers
// whose events do not come over NATS are otherwise ignored. Records with a
// custom Events.Subject are followed on the consumer's one subject.
func (c *Consumer) Notify(n fleet.Notification) {
	c.tracker.Follow(n, fleet.EventsNATS)
}

// Reconnected asks every worker rank for what it missed while the
// connection was down. It returns at once (safe in a reconnect hook).
func (c *Consumer) Reconnected() {
	// A reconnect hook can fire while Close runs: adding to wg after
	// Close began waiting on it would race the Wait (and start a resync
	// of a closed tracker).
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.log.Info("event plane: NATS reconnected, recovering every worker")
		c.tracker.Resync()
	}()
}

// Workers returns the worker ranks followed.
func (c *Consumer) Workers() []kvevent.WorkerRank { return c.tracker.Workers() }

// Close unsubscribes and stops every follower.
func (c *Consumer) Close() error {
	c.mu.Lock()
	sub := c.sub
	c.sub, c.closed = nil, true
	c.mu.Unlock()
	var err error
	if sub != nil && !c.conn.IsClosed() {
		err = sub.Unsubscribe()
	}
	c.tracker.Close()
	c.wg.Wait()
	return err
}
