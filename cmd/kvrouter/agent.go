package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/eventplane/agent"
	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/registry"
)

func init() {
	register("agent", command{summary: "sidecar next to a vLLM/SGLang engine: its ZMQ KV events to NATS, recovery, registration", run: runAgent})
}

func runAgent(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	cfg := agent.DefaultConfig()
	nc := natsbus.DefaultConfig()
	nc.URL = "nats://127.0.0.1:4222"
	nc.Name = "kvrouter-agent"
	rc := registry.DefaultRegistryConfig()
	var workerID uint64
	var hash, logLevel string
	var noRegister, durableEvents bool
	var plane string
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Record.Name, "name", "", "worker name, unique in the fleet (required)")
	fs.Uint64Var(&workerID, "worker-id", 0, "worker id in KV events (0: derived from --name)")
	fs.StringVar(&cfg.Record.URL, "url", "", "engine's OpenAI-compatible HTTP base URL, e.g. http://10.0.0.5:8000 (required)")
	fs.StringVar(&cfg.Record.Model, "model", "", "served model name")
	fs.IntVar(&cfg.Record.BlockSize, "block-size", 16, "engine KV block size in tokens")
	dpStart := fs.Uint("data-parallel-start-rank", 0, "first data-parallel rank of the engine")
	dpSize := fs.Uint("data-parallel-size", 1, "data-parallel ranks of the engine (rank r publishes on endpoint port + r)")
	fs.Uint64Var(&cfg.Record.KVCapacityBlocks, "kv-capacity-blocks", 0, "engine KV cache size in blocks (0: unknown)")
	fs.Uint64Var(&cfg.Record.MaxBatchedTokens, "max-num-batched-tokens", 0, "engine max batched tokens per step (0: unknown)")
	fs.StringVar(&cfg.Endpoint, "kv-events-endpoint", "tcp://127.0.0.1:5557", "engine ZMQ PUB endpoint of the first rank")
	fs.StringVar(&cfg.Replay, "kv-events-replay-endpoint", "", "engine ZMQ replay endpoint of the first rank (empty: none)")
	fs.StringVar(&cfg.Topic, "kv-events-topic", "", "ZMQ topic filter (empty: everything)")
	fs.StringVar(&cfg.Publisher.Namespace, "namespace", cfg.Publisher.Namespace, "event-plane namespace")
	fs.StringVar(&cfg.Publisher.Component, "component", cfg.Publisher.Component, "event-plane component")
	fs.BoolVar(&cfg.Publisher.Bare, "bare-events", false, "publish bare RouterEvents instead of Dynamo's envelope")
	fs.IntVar(&cfg.BufferEvents, "event-buffer", cfg.BufferEvents, "events kept for recovery queries")
	fs.StringVar(&hash, "hash-contract", fleet.DefaultHashContract().String(), "block hashing contract of the published local hashes")
	fs.StringVar(&plane, "event-plane", "nats", "nats: RouterEvents on NATS; zmq: RouterEvents on a ZMQ PUB (--publish-endpoint) with recovery on a ROUTER (--query-endpoint), no NATS")
	fs.StringVar(&cfg.ZMQ.Endpoint, "publish-endpoint", "tcp://*:5600", "ZMQ PUB endpoint for RouterEvents (--event-plane zmq)")
	fs.StringVar(&cfg.ZMQ.QueryEndpoint, "query-endpoint", "tcp://*:5601", "ZMQ ROUTER endpoint answering recovery queries (--event-plane zmq)")
	fs.BoolVar(&noRegister, "no-register", false, "do not register the worker in the NATS KV registry")
	fs.BoolVar(&durableEvents, "durable-kv-events", false, "make sure the JetStream stream keeping the events exists (routers in durable mode)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	nc.BindFlags(fs)
	rc.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	natsSecretsFromEnv(fs, os.LookupEnv)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvrouter agent: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fail("--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	switch plane {
	case "zmq":
		cfg.Register = false
	case "nats":
		cfg.ZMQ = zmqevents.PublisherConfig{}
		if nc.URL == "" {
			return fail("--nats-url is required (the agent connects to the router's or the fleet's NATS)")
		}
	default:
		return fail("--event-plane %q: want nats or zmq", plane)
	}
	if cfg.Record.URL == "" {
		return fail("--url is required")
	}
	h, err := fleet.ParseHashContract(hash)
	if err != nil {
		return fail("--hash-contract: %v", err)
	}
	cfg.Record.Hash = h
	cfg.Record.ID = fleet.DeriveID(cfg.Record.Name)
	if workerID != 0 {
		cfg.Record.ID = kvevent.WorkerID(workerID)
	}
	cfg.Record.DPStart, cfg.Record.DPSize = uint32(*dpStart), uint32(*dpSize)
	cfg.Register = cfg.Register && !noRegister
	if err := cfg.Validate(); err != nil {
		return fail("%v", err)
	}
	if plane == "zmq" {
		a, err := agent.New(cfg, nil, nil, nil, log)
		if err != nil {
			return fail("%v", err)
		}
		ev := a.Record().Events
		log.Info("agent: list this worker in the routers' static workers", "events", ev.Endpoint, "replay", ev.Replay)
		if err := a.Run(ctx); err != nil {
			log.Error("agent stopped", "err", err)
			return 1
		}
		return 0
	}
	bus, err := natsbus.Start(nc, log)
	if err != nil {
		return fail("connecting to NATS: %v", err)
	}
	defer func() { bus.Shutdown(); bus.WaitForShutdown() }()
	if durableEvents {
		if _, err := durable.EnsureStream(ctx, bus.JetStream(), cfg.Publisher.Namespace, cfg.Publisher.Component, time.Hour); err != nil {
			return fail("%v", err)
		}
	}
	var reg *registry.Registry
	if cfg.Register {
		if reg, err = registry.OpenRegistry(ctx, bus.JetStream(), rc, log); err != nil {
			return fail("opening the registry: %v", err)
		}
	}
	a, err := agent.New(cfg, bus.Conn(), reg, nil, log)
	if err != nil {
		return fail("%v", err)
	}
	a.OnReconnect(bus.OnReconnect)
	if err := a.Run(ctx); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// natsSecretFlags are the NATS credentials a sidecar should take from its
// environment (a Kubernetes Secret) rather than its command line, where
// they would show in the process list.
var natsSecretFlags = []string{"nats-token", "nats-user", "nats-password"}

// natsSecretsFromEnv sets each NATS credential flag not given on the
// command line from KVROUTER_<FLAG> (KVROUTER_NATS_TOKEN, ...), as `serve`
// does. Applied after parsing so that -h never prints a secret as a
// default.
func natsSecretsFromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range natsSecretFlags {
		if set[name] {
			continue
		}
		if v, ok := lookup(config.EnvName(name)); ok {
			_ = fs.Set(name, v) // string flags: never fails
		}
	}
}

// mockerNATS wires `kvrouter mocker --event-plane nats`: each mock worker
// publishes RouterEvents on NATS through a server.NATSSink (the agent logic
// in process: local indexer first, recovery answers) and registers itself.
type mockerNATS struct {
	nats      natsbus.Config
	registry  registry.RegistryConfig
	namespace string
	component string
	durable   bool
	bus       *natsbus.Bus
	reg       *registry.Registry
	leases    []*registry.Lease[fleet.WorkerRecord]
}

func (m *mockerNATS) bindFlags(fs *flag.FlagSet) {
	m.nats = natsbus.DefaultConfig()
	m.nats.URL, m.nats.Name = "nats://127.0.0.1:4222", "kvrouter-mocker"
	m.registry = registry.DefaultRegistryConfig()
	pc := natsevents.DefaultPublisherConfig()
	fs.StringVar(&m.namespace, "namespace", pc.Namespace, "event-plane namespace (--event-plane nats)")
	fs.StringVar(&m.component, "component", pc.Component, "event-plane component (--event-plane nats)")
	fs.BoolVar(&m.durable, "durable-kv-events", false, "make sure the JetStream stream keeping the events exists (--event-plane nats, routers in durable mode)")
	m.nats.BindFlags(fs)
	m.registry.BindFlags(fs)
}

func (m *mockerNATS) start(ctx context.Context, log *slog.Logger) error {
	if m.nats.URL == "" {
		return errors.New("--event-plane nats needs --nats-url")
	}
	var err error
	if m.bus, err = natsbus.Start(m.nats, log); err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	if m.durable {
		if _, err := durable.EnsureStream(ctx, m.bus.JetStream(), m.namespace, m.component, time.Hour); err != nil {
			m.close()
			return err
		}
	}
	if m.reg, err = registry.OpenRegistry(ctx, m.bus.JetStream(), m.registry, log); err != nil {
		m.close()
		return fmt.Errorf("opening the registry: %w", err)
	}
	return nil
}

func (m *mockerNATS) sink(cfg server.Config) (*server.NATSSink, error) {
	pc := natsevents.DefaultPublisherConfig()
	pc.Namespace, pc.Component, pc.Logger = m.namespace, m.component, cfg.Logger
	return server.NewNATSSink(m.bus.Conn(), pc, mockerWorkerID(cfg), cfg.DataParallelSize)
}

// mockerWorkerID is the id a mock worker publishes and registers under:
// --worker-id (+k), or, for 0, the id derived from its name.
func mockerWorkerID(cfg server.Config) uint64 {
	if cfg.WorkerID != 0 {
		return cfg.WorkerID
	}
	return uint64(fleet.DeriveID(fmt.Sprintf("mocker-%d", cfg.WorkerID)))
}

// serve answers w's recovery queries and registers it under url.
func (m *mockerNATS) serve(ctx context.Context, s *server.NATSSink, w *server.Worker, cfg server.Config, url string) error {
	if err := s.Serve(w); err != nil {
		return err
	}
	rec := fleet.WorkerRecord{ID: kvevent.WorkerID(mockerWorkerID(cfg)), Name: fmt.Sprintf("mocker-%d", cfg.WorkerID),
		Model: cfg.ServedModelName, URL: url, BlockSize: cfg.Engine.BlockSize, DPSize: uint32(cfg.DataParallelSize),
		KVCapacityBlocks: uint64(cfg.Engine.NumGPUBlocks), MaxBatchedTokens: uint64(cfg.Engine.MaxNumBatchedTokens),
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract(), RegisteredBy: "mocker"}
	if rec.Model == "" {
		rec.Model = cfg.Model
	}
	l, err := m.reg.Register(ctx, rec)
	if err != nil {
		return fmt.Errorf("registering worker %d: %w", cfg.WorkerID, err)
	}
	l.RefreshOnReconnect(m.bus.OnReconnect)
	m.leases = append(m.leases, l)
	return nil
}

func (m *mockerNATS) close() {
	for _, l := range m.leases {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = l.Close(cctx)
		cancel()
	}
	if m.bus != nil {
		m.bus.Shutdown()
		m.bus.WaitForShutdown()
	}
}

// mockerDynamoZMQSink builds worker k's sink for `kvrouter mocker
// --event-plane dynamo-zmq`: RouterEvents on a ZMQ PUB at the kv-events
// endpoint's port + k, recovery on a ROUTER at the replay endpoint's port
// + k (the agent's --event-plane zmq, in process).
func mockerDynamoZMQSink(ev server.KVEventsConfig, k int, cfg server.Config) (*server.NATSSink, string, string, error) {
	if ev.Endpoint == "" || ev.ReplayEndpoint == "" {
		return nil, "", "", errors.New("--event-plane dynamo-zmq needs endpoint and replay_endpoint in --kv-events-config")
	}
	ep, err := server.OffsetEndpoint(ev.Endpoint, k)
	if err != nil {
		return nil, "", "", err
	}
	qep, err := server.OffsetEndpoint(ev.ReplayEndpoint, k)
	if err != nil {
		return nil, "", "", err
	}
	zp, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: ep, QueryEndpoint: qep, Logger: cfg.Logger})
	if err != nil {
		return nil, "", "", err
	}
	return server.NewRouterEventSink(zp, cfg.WorkerID, cfg.DataParallelSize), zp.Endpoint(), zp.QueryEndpoint(), nil
}
