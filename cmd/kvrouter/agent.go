package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
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

const agentSummary = "Run next to a vLLM or SGLang engine: forward its ZMQ KV events to the routers, answer their recovery queries and register the worker."

func init() {
	register("agent", command{summary: agentSummary, run: runAgent})
}

var agentUsage = helpText(agentSummary, "kvrouter agent --name NAME --url URL [flags]",
	`Reads the engine's ZMQ KV event stream (--kv-events-endpoint, rank r on port + r), keeps the
worker's local index, and publishes RouterEvents on NATS (--event-plane nats, registering the
worker in the registry) or on its own ZMQ sockets (--event-plane zmq, for routers with
--event-plane zmq and a static worker list). Give NATS credentials through KVROUTER_NATS_TOKEN
etc. rather than flags, which show in the process list.`)

func runAgent(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	a, _, code, ok := load[config.Agent]("agent", agentUsage, args, config.DefaultAgent, stdout, stderr)
	if !ok {
		return code
	}
	cfg, err := a.AgentConfig()
	if err != nil { // Validate built it once already
		fmt.Fprintf(stderr, "kvrouter agent: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: config.ParseLevel(a.LogLevel)}))
	if a.EventPlane == config.PlaneZMQ {
		return runAgentZMQ(ctx, cfg, log, stderr)
	}
	return runAgentNATS(ctx, a, cfg, log, stderr)
}

// runAgentZMQ runs the agent with its own ZMQ PUB and ROUTER sockets.
func runAgentZMQ(ctx context.Context, cfg agent.Config, log *slog.Logger, stderr io.Writer) int {
	a, err := agent.New(cfg, nil, nil, nil, log)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter agent: %v\n", err)
		return 1
	}
	ev := a.Record().Events
	log.Info("agent: list this worker in the routers' static workers", "events", ev.Endpoint, "replay", ev.Replay)
	if err := a.Run(ctx); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// runAgentNATS runs the agent on NATS: events, recovery, registration.
func runAgentNATS(ctx context.Context, a config.Agent, cfg agent.Config, log *slog.Logger, stderr io.Writer) int {
	fail := func(format string, v ...any) int {
		fmt.Fprintf(stderr, "kvrouter agent: "+format+"\n", v...)
		return 1
	}
	bus, err := natsbus.Start(a.NATS, log)
	if err != nil {
		return fail("connecting to NATS: %v", err)
	}
	defer func() { bus.Shutdown(); bus.WaitForShutdown() }()
	if a.Durable {
		if _, err := durable.EnsureStream(ctx, bus.JetStream(), cfg.Publisher.Namespace, cfg.Publisher.Component, time.Hour, a.NATS.Replicas); err != nil {
			return fail("%v", err)
		}
	}
	var reg *registry.Registry
	if cfg.Register {
		rc := a.Registry
		rc.Replicas = a.NATS.Replicas
		if reg, err = registry.OpenRegistry(ctx, bus.JetStream(), rc, log); err != nil {
			return fail("opening the registry: %v", err)
		}
	}
	ag, err := agent.New(cfg, bus.Conn(), reg, nil, log)
	if err != nil {
		return fail("%v", err)
	}
	ag.OnReconnect(bus.OnReconnect)
	if err := ag.Run(ctx); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
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

func newMockerNATS(m config.Mocker) *mockerNATS {
	return &mockerNATS{nats: m.NATS, registry: m.Registry, namespace: m.Namespace, component: m.Component, durable: m.Durable}
}

func (m *mockerNATS) start(ctx context.Context, log *slog.Logger) error {
	var err error
	if m.bus, err = natsbus.Start(m.nats, log); err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	if m.durable {
		if _, err := durable.EnsureStream(ctx, m.bus.JetStream(), m.namespace, m.component, time.Hour, m.nats.Replicas); err != nil {
			m.close()
			return err
		}
	}
	m.registry.Replicas = m.nats.Replicas
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
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract(), RegisteredBy: "mocker",
		Role: config.MockerRole(cfg.Disagg.Mode)}
	if rec.Role == fleet.RolePrefill && cfg.Disagg.Protocol == server.ProtocolSGLang {
		rec.BootstrapPort = cfg.Disagg.BootstrapPort
		if rec.BootstrapPort == 0 {
			_, p, _ := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
			rec.BootstrapPort, _ = strconv.Atoi(p)
		}
	}
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
