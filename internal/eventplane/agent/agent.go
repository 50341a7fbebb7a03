package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/nats-io/nats.go"
)

// Config configures an agent.
type Config struct {
	// Record is the worker's registry record. ID (derived from Name when
	// 0), Name, URL and BlockSize are required; DPStart/DPSize say which
	// ranks the engine runs (DPSize default 1). Events is set by the agent
	// (kind nats).
	Record fleet.WorkerRecord
	// Endpoint is the engine's ZMQ PUB endpoint of rank DPStart, e.g.
	// "tcp://127.0.0.1:5557"; rank DPStart+r listens on port + r. Required.
	Endpoint string
	// Replay is the engine's ZMQ replay endpoint of rank DPStart; empty:
	// none. Default "".
	Replay string
	// Topic is the ZMQ topic filter. Default "" (everything).
	Topic string
	// Publisher names the NATS subjects (NATS transport).
	Publisher natsevents.PublisherConfig
	// ZMQ, when its Endpoint is set, publishes on a ZMQ PUB socket and
	// answers recovery on a ZMQ ROUTER instead of NATS (--event-plane zmq);
	// the agent then needs no NATS connection and registers nowhere (list
	// it in the routers' static workers). Default: unset (NATS).
	ZMQ zmqevents.PublisherConfig
	// BufferEvents is the local indexer's ring buffer, in events. Default
	// 1024.
	BufferEvents int
	// Register keeps the record in the registry. Default true.
	Register bool
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{Publisher: natsevents.DefaultPublisherConfig(), BufferEvents: localindex.Capacity, Register: true,
		Record: fleet.WorkerRecord{DPSize: 1, Hash: fleet.DefaultHashContract()}}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Record.Name == "" && c.Record.ID == 0:
		return errors.New("agent: worker name (or id) is required")
	case c.Record.BlockSize <= 0:
		return errors.New("agent: block size must be positive")
	case c.Endpoint == "":
		return errors.New("agent: engine ZMQ endpoint is required")
	case c.BufferEvents < 0:
		return errors.New("agent: negative buffer")
	}
	return nil
}

// publisher is the transport: natsevents.Publisher or zmqevents.Publisher.
type publisher interface {
	Publish(evs []kvevent.Event) error
	Serve(w kvevent.WorkerRank, rec localindex.Recovery) error
	ID() uint64
	Close() error
}

var (
	_ publisher = (*natsevents.Publisher)(nil)
	_ publisher = (*zmqevents.Publisher)(nil)
)

// Agent is one running sidecar.
type Agent struct {
	cfg   Config
	conn  *nats.Conn
	reg   *registry.Registry
	pub   publisher
	ranks []*rank
	log   *slog.Logger
	zm    *vllmzmq.Metrics
	hooks func(hook func()) (remove func())
}

// OnReconnect gives the agent the connection's reconnect hook registrar
// (natsbus.Bus.OnReconnect): the registration is re-put right after a
// reconnect instead of at the next heartbeat. Call it before Run.
func (a *Agent) OnReconnect(register func(hook func()) (remove func())) { a.hooks = register }

type rank struct {
	w     kvevent.WorkerRank
	local *localindex.Index
	pub   publisher
	log   *slog.Logger
	sub   *vllmzmq.Subscriber
}

// Apply is the vllmzmq.Handler: local indexer first, then NATS.
func (r *rank) Apply(_ uint64, evs []kvevent.Event) {
	if len(evs) == 0 {
		return
	}
	stamped := r.local.Apply(evs)
	if err := r.pub.Publish(stamped); err != nil {
		// The events are in the local indexer: routers recover them
		// through the gap the next event reveals.
		r.log.Warn("agent: publishing events failed", "worker", r.w.String(), "err", err)
	}
}

// StateChanged logs the engine stream's state.
func (r *rank) StateChanged(c vllmzmq.StateChange) {
	r.log.Info("agent: engine event stream", "worker", c.Worker.String(), "state", c.State.String(), "reason", c.Reason)
}

// New builds an agent publishing on conn and registering in reg (nil: no
// registration). zm may be nil; log may be nil.
func New(cfg Config, conn *nats.Conn, reg *registry.Registry, zm *vllmzmq.Metrics, log *slog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if cfg.Record.ID == 0 {
		cfg.Record.ID = fleet.DeriveID(cfg.Record.Name)
	}
	cfg.Record.DPSize = max(cfg.Record.DPSize, 1)
	cfg.Record.Events = fleet.EventSource{Kind: fleet.EventsNATS}
	if cfg.Record.RegisteredBy == "" {
		cfg.Record.RegisteredBy = "agent"
	}
	var pub publisher
	if cfg.ZMQ.Endpoint != "" {
		cfg.ZMQ.Logger = log
		zp, err := zmqevents.NewPublisher(cfg.ZMQ)
		if err != nil {
			return nil, err
		}
		cfg.Record.Events = fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: zp.Endpoint(), Replay: zp.QueryEndpoint()}
		pub, reg = zp, nil
	} else {
		if conn == nil {
			return nil, errors.New("agent: a NATS connection is required (or a ZMQ endpoint)")
		}
		cfg.Publisher.Logger = log
		np, err := natsevents.NewPublisher(cfg.Publisher, conn)
		if err != nil {
			return nil, err
		}
		pub = np
	}
	a := &Agent{cfg: cfg, conn: conn, reg: reg, pub: pub, log: log, zm: zm}
	ok := false
	defer func() {
		if !ok {
			_ = pub.Close()
		}
	}()
	for i := range cfg.Record.DPSize {
		r := cfg.Record.DPStart + i
		w := kvevent.WorkerRank{ID: cfg.Record.ID, Rank: kvevent.DPRank(r)}
		ep, err := vllmzmq.OffsetEndpoint(cfg.Endpoint, int(i))
		if err != nil {
			return nil, fmt.Errorf("agent: rank %d endpoint: %w", r, err)
		}
		rep := ""
		if cfg.Replay != "" {
			if rep, err = vllmzmq.OffsetEndpoint(cfg.Replay, int(i)); err != nil {
				return nil, fmt.Errorf("agent: rank %d replay endpoint: %w", r, err)
			}
		}
		rk := &rank{w: w, local: localindex.New(w, cfg.BufferEvents), pub: pub, log: log}
		sc := vllmzmq.DefaultSubscriberConfig()
		sc.Worker, sc.Endpoint, sc.ReplayEndpoint, sc.Topic, sc.BlockSize = w, ep, rep, cfg.Topic, cfg.Record.BlockSize
		sc.Logger, sc.Metrics = log, zm
		if rk.sub, err = vllmzmq.NewSubscriber(sc, rk); err != nil {
			return nil, fmt.Errorf("agent: rank %d: %w", r, err)
		}
		a.ranks = append(a.ranks, rk)
	}
	ok = true
	return a, nil
}

// Record returns the record the agent registers.
func (a *Agent) Record() fleet.WorkerRecord { return a.cfg.Record }

// LocalIndex returns the local indexer of the i-th rank (0-based from
// DPStart), nil when out of range.
func (a *Agent) LocalIndex(i int) *localindex.Index {
	if i < 0 || i >= len(a.ranks) {
		return nil
	}
	return a.ranks[i].local
}

// PublisherID returns the envelope publisher id of this agent process.
func (a *Agent) PublisherID() uint64 { return a.pub.ID() }

// Run serves recovery queries, follows the engine and keeps the worker
// registered until ctx ends; then it deregisters (the record is deleted,
// routers drop the worker's blocks) and returns nil.
func (a *Agent) Run(ctx context.Context) error {
	for _, r := range a.ranks {
		if err := a.pub.Serve(r.w, r.local); err != nil {
			_ = a.pub.Close()
			return err
		}
	}
	if a.conn != nil {
		if err := a.conn.Flush(); err != nil {
			_ = a.pub.Close()
			return fmt.Errorf("agent: %w", err)
		}
	}
	var lease *registry.Lease[fleet.WorkerRecord]
	if a.reg != nil && a.cfg.Register {
		var err error
		if lease, err = a.reg.Register(ctx, a.cfg.Record); err != nil {
			_ = a.pub.Close()
			return fmt.Errorf("agent: registering worker: %w", err)
		}
		if a.hooks != nil {
			lease.RefreshOnReconnect(a.hooks)
		}
	}
	a.log.Info("agent: running", "worker_id", uint64(a.cfg.Record.ID), "name", a.cfg.Record.Name, "ranks", len(a.ranks),
		"engine", a.cfg.Endpoint, "events", a.cfg.Record.Events, "publisher_id", a.pub.ID())
	var wg sync.WaitGroup
	errs := make([]error, len(a.ranks))
	for i, r := range a.ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.sub.Run(ctx)
		}()
	}
	wg.Wait()
	if lease != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := lease.Close(cctx); err != nil {
			a.log.Warn("agent: deregistering", "err", err)
		}
		cancel()
	}
	err := errors.Join(errs...)
	return errors.Join(err, a.pub.Close())
}
