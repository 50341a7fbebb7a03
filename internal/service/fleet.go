package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/prometheus/client_golang/prometheus"
)

// FleetConfig describes a fleet of mock vLLM workers on loopback ports, as
// `kvrouter up` and the end-to-end tests run them.
type FleetConfig struct {
	// Workers is the number of mock workers. Default 4.
	Workers int
	// Model is the served model name. Default "Qwen/Qwen3-0.6B".
	Model string
	// Models, when set, replaces Model: worker k serves Models[k mod
	// len(Models)], with that model's block size. Default none.
	Models []FleetModel
	// Engine configures every worker's engine core (block size, KV blocks,
	// speedup...). Default mocker.DefaultConfig().
	Engine mocker.Config
	// PerWorker varies Engine per worker (speed, token budget, KV
	// blocks); its lists must fit Workers. Default the zero Fleet.
	PerWorker mocker.Fleet
	// Tokenizer is the workers' tokenizer; give them the router's so that
	// both count the same tokens. Required.
	Tokenizer server.Tokenizer
	// ZMQ chooses the event encoding and replay reply format. Default:
	// tagged maps, replay with topic (current vLLM).
	ZMQ server.ZMQOptions
	// NoReplay starts the publishers without a replay socket. Default false.
	NoReplay bool
	// Topic is the ZMQ topic. Default "kv-events".
	Topic string
	// Faults injects failures into every worker (tests). Default none.
	Faults server.Faults
	// Plane is how the workers publish KV events: FleetEngineZMQ (the
	// default) in vLLM's own ZMQ format; config.PlaneNATS as Dynamo
	// RouterEvents on Bus, registering in the NATS KV registry with a
	// heartbeat (what `kvrouter mocker --event-plane nats` does);
	// config.PlaneZMQ as RouterEvents on a ZMQ PUB with a recovery ROUTER
	// (`kvrouter mocker --event-plane dynamo-zmq`).
	Plane string
	// Bus is the NATS connection of Plane nats (the router's, in `up`).
	Bus *natsbus.Bus
	// Namespace and Component name the NATS subjects. Defaults "dynamo"
	// and "backend".
	Namespace, Component string
	// Registry is the registry bucket and TTL. Default
	// registry.DefaultRegistryConfig().
	Registry registry.RegistryConfig
	// ChatTemplate renders chat requests on the workers; give them the
	// router's so that both count the same tokens. Default nil (the mock
	// server's ChatML fallback).
	ChatTemplate server.ChatTemplate
	// Logger receives the workers' logs; nil means slog.Default().
	Logger *slog.Logger
	// PrefillWorkers and DecodeWorkers of the Workers (the first ones, in
	// that order) serve disaggregated requests in those roles; the rest
	// are aggregated. Default 0 and 0.
	PrefillWorkers, DecodeWorkers int
	// PDProtocol is the disaggregated workers' protocol, vllm or sglang
	// (an SGLang prefill worker's bootstrap port is its HTTP port).
	// Default vllm.
	PDProtocol string
	// Metrics, when set, counts Plane nats workers' failed heartbeats and
	// retries (the router's registry, in `up`). Default nil.
	Metrics *prometheus.Registry
}

// role is worker k's role and disaggregation mode.
func (cfg FleetConfig) role(k int) (fleet.Role, string) {
	switch {
	case k < cfg.PrefillWorkers:
		return fleet.RolePrefill, server.ModePrefill
	case k < cfg.PrefillWorkers+cfg.DecodeWorkers:
		return fleet.RoleDecode, server.ModeDecode
	}
	return "", server.ModeAgg
}

// FleetModel is one model a mixed fleet serves.
type FleetModel struct {
	// Name is the served model name.
	Name string
	// BlockSize is its workers' KV block size; 0 means Engine's.
	BlockSize int
	// LoRAAdapters are the LoRA adapters its workers have loaded.
	LoRAAdapters []string
}

// DefaultFleetConfig returns 4 workers with default engines; the
// tokenizer is still to be set.
func DefaultFleetConfig() FleetConfig {
	pc := natsevents.DefaultPublisherConfig()
	return FleetConfig{Workers: 4, Model: server.DefaultConfig().Model, Engine: mocker.DefaultConfig(), Topic: "kv-events",
		Plane: FleetEngineZMQ, Namespace: pc.Namespace, Component: pc.Component, Registry: registry.DefaultRegistryConfig()}
}

// FleetEngineZMQ is the fleet plane where every worker publishes vLLM-format
// ZMQ events (with a replay socket), read straight by the router.
const FleetEngineZMQ = "engine-zmq"

// Fleet is a set of running mock workers.
type Fleet struct {
	// Workers are the running workers, in order.
	Workers []*FleetWorker

	registry *registry.Registry
}

// FleetWorker is one running mock worker.
type FleetWorker struct {
	// Name is the worker's name ("mock-1").
	Name string
	// Model is the model it serves.
	Model string
	// URL is its HTTP base URL.
	URL string
	// Events and Replay are its ZMQ endpoints (Replay empty without one).
	Events, Replay string
	// Topic is its ZMQ topic.
	Topic string
	// BlockSize is its KV block size.
	BlockSize int
	// KVBlocks is its device KV capacity in blocks.
	KVBlocks int
	// BatchTokens is its engine's max tokens per step.
	BatchTokens int
	// Role is its part in a disaggregated fleet ("" for aggregated).
	Role fleet.Role
	// BootstrapPort is an SGLang prefill worker's bootstrap port.
	BootstrapPort int
	// Worker is the mock server itself (its local index is the engine's
	// true cache state).
	Worker *server.Worker

	sink   server.EventSink
	lease  *registry.Lease[fleet.WorkerRecord]
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// StartFleet starts cfg.Workers mock workers on free loopback ports, each
// publishing vLLM-format KV events on its own ZMQ PUB (and replay) socket.
// Stop them with Fleet.Stop; on error, those already started are stopped.
func StartFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Workers < 1 || cfg.Workers > 1024 {
		return nil, fmt.Errorf("fleet: %d workers out of range [1, 1024]", cfg.Workers)
	}
	if cfg.Tokenizer == nil {
		return nil, errors.New("fleet: tokenizer is required")
	}
	if err := cfg.PerWorker.Validate(cfg.Engine, cfg.Workers); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if cfg.PrefillWorkers < 0 || cfg.DecodeWorkers < 0 || cfg.PrefillWorkers+cfg.DecodeWorkers > cfg.Workers {
		return nil, fmt.Errorf("fleet: %d prefill and %d decode workers out of %d", cfg.PrefillWorkers, cfg.DecodeWorkers, cfg.Workers)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	f := &Fleet{}
	if cfg.Plane == "" {
		cfg.Plane = FleetEngineZMQ
	}
	switch cfg.Plane {
	case FleetEngineZMQ, config.PlaneZMQ:
	case config.PlaneNATS:
		if cfg.Bus == nil {
			return nil, errors.New("fleet: the nats plane needs a bus")
		}
		reg, err := registry.OpenRegistry(context.Background(), cfg.Bus.JetStream(), cfg.Registry, log)
		if err != nil {
			return nil, fmt.Errorf("fleet: %w", err)
		}
		if cfg.Metrics != nil {
			hb, err := registry.NewHeartbeatMetrics(cfg.Metrics)
			if err != nil {
				return nil, fmt.Errorf("fleet: %w", err)
			}
			reg.CountHeartbeats(hb)
		}
		f.registry = reg
	default:
		return nil, fmt.Errorf("fleet: plane %q: want %s, %s or %s", cfg.Plane, FleetEngineZMQ, config.PlaneNATS, config.PlaneZMQ)
	}
	for k := range cfg.Workers {
		w, err := f.startMock(cfg, k, log, "127.0.0.1:0", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0")
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.Workers = append(f.Workers, w)
	}
	return f, nil
}

// startMock starts worker k listening on httpAddr with its event sockets
// on events and replay (port 0: a free one), or on the NATS bus.
func (f *Fleet) startMock(cfg FleetConfig, k int, log *slog.Logger, httpAddr, events, replay string) (*FleetWorker, error) {
	name := fmt.Sprintf("mock-%d", k+1)
	id := uint64(fleet.DeriveID(name))
	wlog := log.With("worker", name)
	fw := &FleetWorker{Name: name, Topic: cfg.Topic, done: make(chan error, 1)}
	rsink, err := fw.openSink(cfg, id, events, replay, wlog)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	sc := mockConfig(cfg, k, id, fw.sink, wlog)
	mw, err := server.New(sc)
	if err != nil {
		fw.sink.Close()
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	if rsink != nil {
		if err := rsink.Serve(mw); err != nil {
			mw.CloseSinks()
			return nil, fmt.Errorf("fleet %s: answering recovery queries: %w", name, err)
		}
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		mw.CloseSinks()
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	fw.URL = "http://" + ln.Addr().String()
	fw.BlockSize, fw.KVBlocks, fw.BatchTokens, fw.Worker, fw.Model = sc.Engine.BlockSize, sc.Engine.NumGPUBlocks, sc.Engine.MaxNumBatchedTokens, mw, sc.Model
	fw.Role, _ = cfg.role(k)
	if fw.Role == fleet.RolePrefill && sc.Disagg.Protocol == server.ProtocolSGLang {
		fw.BootstrapPort = ln.Addr().(*net.TCPAddr).Port
	}
	if f.registry != nil {
		if err := f.register(cfg, fw, id, sc); err != nil {
			ln.Close()
			mw.CloseSinks()
			return nil, fmt.Errorf("fleet %s: registering: %w", name, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	fw.cancel = cancel
	go func() { fw.done <- mw.Serve(ctx, ln) }()
	return fw, nil
}

// openSink opens the worker's event sink for cfg's plane and sets its
// event endpoints; the returned RouterEvent sink (nil for vLLM's ZMQ
// protocol) answers recovery queries once served.
func (fw *FleetWorker) openSink(cfg FleetConfig, id uint64, events, replay string, wlog *slog.Logger) (*server.NATSSink, error) {
	switch cfg.Plane {
	case config.PlaneNATS:
		pc := natsevents.DefaultPublisherConfig()
		pc.Namespace, pc.Component, pc.Logger = cfg.Namespace, cfg.Component, wlog
		s, err := server.NewNATSSink(cfg.Bus.Conn(), pc, id, 1)
		if err != nil {
			return nil, err
		}
		fw.sink, fw.Events = s, "nats"
		return s, nil
	case config.PlaneZMQ:
		zp, err := zmqevents.NewPublisher(zmqevents.PublisherConfig{Endpoint: events, QueryEndpoint: replay, Logger: wlog})
		if err != nil {
			return nil, err
		}
		rsink := server.NewRouterEventSink(zp, id, 1)
		fw.sink, fw.Events, fw.Replay, fw.Topic = rsink, zp.Endpoint(), zp.QueryEndpoint(), ""
		return rsink, nil
	}
	ev := server.DefaultKVEventsConfig()
	ev.EnableKVCacheEvents = true
	ev.Endpoint = events
	if !cfg.NoReplay {
		ev.ReplayEndpoint = replay
	}
	ev.Topic = cfg.Topic
	zs, err := server.NewZMQSink(ev, cfg.ZMQ, 0, 1, wlog)
	if err != nil {
		return nil, err
	}
	fw.sink, fw.Events, fw.Replay = zs, zs.Endpoint(0), zs.ReplayEndpoint(0)
	return nil, nil
}

// mockConfig is worker k's mock server configuration, publishing to sink.
func mockConfig(cfg FleetConfig, k int, id uint64, sink server.EventSink, wlog *slog.Logger) server.Config {
	sc := server.DefaultConfig()
	if cfg.Model != "" {
		sc.Model = cfg.Model
	}
	sc.Engine = cfg.PerWorker.Engine(cfg.Engine, k)
	if len(cfg.Models) > 0 {
		m := cfg.Models[k%len(cfg.Models)]
		sc.Model = m.Name
		sc.LoRAAdapters = m.LoRAAdapters
		if m.BlockSize > 0 {
			sc.Engine.BlockSize = m.BlockSize
		}
	}
	sc.Engine.HashSeed = cfg.Engine.HashSeed + uint64(k) // engines need not share a seed
	sc.WorkerID = id
	sc.Tokenizer = cfg.Tokenizer
	sc.ChatTemplate = cfg.ChatTemplate
	sc.Logger = wlog
	sc.Sinks = []server.EventSink{sink}
	sc.Faults = cfg.Faults
	_, sc.Disagg.Mode = cfg.role(k)
	if cfg.PDProtocol != "" {
		sc.Disagg.Protocol = cfg.PDProtocol
	}
	return sc
}

// register puts the worker's record in the registry, its lease re-put at
// each reconnect.
func (f *Fleet) register(cfg FleetConfig, fw *FleetWorker, id uint64, sc server.Config) error {
	rec := fleet.WorkerRecord{ID: kvevent.WorkerID(id), Name: fw.Name, Model: sc.Model, URL: fw.URL, BlockSize: fw.BlockSize,
		DPSize: 1, KVCapacityBlocks: uint64(fw.KVBlocks), MaxBatchedTokens: uint64(sc.Engine.MaxNumBatchedTokens),
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract(), RegisteredBy: "kvrouter up",
		Role: fw.Role, BootstrapPort: fw.BootstrapPort}
	var err error
	if fw.lease, err = f.registry.Register(context.Background(), rec); err != nil {
		return err
	}
	fw.lease.RefreshOnReconnect(cfg.Bus.OnReconnect)
	return nil
}

// Stop stops the worker (gracefully: in-flight streams end) and waits for
// it; it returns what Serve returned. Idempotent.
func (w *FleetWorker) Stop() error {
	w.once.Do(func() {
		if w.lease != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = w.lease.Close(ctx) // deregister: routers drop the worker at once
			cancel()
		}
		w.cancel()
		w.err = <-w.done
	})
	return w.err
}

// RestartEngine makes the worker look to the router like a restarted
// engine process, in place: its event sequence starts again at 0 with an
// empty replay buffer, and its prefix cache is dropped (published as
// AllBlocksCleared, the first batch of the new sequence). It fails while
// requests are in flight.
func (w *FleetWorker) RestartEngine(ctx context.Context) error {
	w.sink.Restart(0)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL+"/reset_prefix_cache", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fleet %s: resetting the prefix cache: %w", w.Name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fleet %s: resetting the prefix cache: %s", w.Name, resp.Status)
	}
	return nil
}

// Static returns the worker as a static worker entry for the router
// (workers on the NATS plane register themselves instead).
func (w *FleetWorker) Static() fleet.StaticWorker {
	return fleet.StaticWorker{Name: w.Name, URL: w.URL, Model: w.Model, Events: w.Events, Replay: w.Replay, Topic: w.Topic,
		BlockSize: w.BlockSize, KVBlocks: uint64(w.KVBlocks), MaxBatchedTokens: uint64(w.BatchTokens), Role: string(w.Role),
		BootstrapPort: w.BootstrapPort}
}

// Static returns every worker as static worker entries.
func (f *Fleet) Static() []fleet.StaticWorker {
	out := make([]fleet.StaticWorker, 0, len(f.Workers))
	if f.registry != nil {
		return out
	}
	for _, w := range f.Workers {
		out = append(out, w.Static())
	}
	return out
}

// Stop stops every worker and waits for them.
func (f *Fleet) Stop() {
	var wg sync.WaitGroup
	for _, w := range f.Workers {
		wg.Go(func() { _ = w.Stop() })
	}
	wg.Wait()
}
