package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/kvrouter/kvrouter/internal/discovery"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
)

// FleetConfig describes a fleet of mock vLLM workers on loopback ports, as
// `kvrouter up` and the end-to-end tests run them.
type FleetConfig struct {
	// Workers is the number of mock workers. Default 4.
	Workers int
	// Model is the served model name. Default "Qwen/Qwen3-0.6B".
	Model string
	// Engine configures every worker's engine core (block size, KV blocks,
	// speedup...). Default mocker.DefaultConfig().
	Engine mocker.Config
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
	// Logger receives the workers' logs; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultFleetConfig returns 4 workers with default engines; the
// tokenizer is still to be set.
func DefaultFleetConfig() FleetConfig {
	return FleetConfig{Workers: 4, Model: server.DefaultConfig().Model, Engine: mocker.DefaultConfig(), Topic: "kv-events"}
}

// Fleet is a set of running mock workers.
type Fleet struct {
	// Workers are the running workers, in order.
	Workers []*FleetWorker
}

// FleetWorker is one running mock worker.
type FleetWorker struct {
	// Name is the worker's name ("mock-1").
	Name string
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
	// Worker is the mock server itself (its local index is the engine's
	// true cache state).
	Worker *server.Worker

	sink   *server.ZMQSink
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
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	f := &Fleet{}
	for k := range cfg.Workers {
		w, err := startMock(cfg, k, log, "127.0.0.1:0", "tcp://127.0.0.1:0", "tcp://127.0.0.1:0")
		if err != nil {
			f.Stop()
			return nil, err
		}
		f.Workers = append(f.Workers, w)
	}
	return f, nil
}

// startMock starts worker k listening on httpAddr with its PUB and replay
// sockets on events and replay (port 0: a free one).
func startMock(cfg FleetConfig, k int, log *slog.Logger, httpAddr, events, replay string) (*FleetWorker, error) {
	name := fmt.Sprintf("mock-%d", k+1)
	ev := server.DefaultKVEventsConfig()
	ev.EnableKVCacheEvents = true
	ev.Endpoint = events
	if !cfg.NoReplay {
		ev.ReplayEndpoint = replay
	}
	ev.Topic = cfg.Topic
	wlog := log.With("worker", name)
	sink, err := server.NewZMQSink(ev, cfg.ZMQ, 0, 1, wlog)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	sc := server.DefaultConfig()
	if cfg.Model != "" {
		sc.Model = cfg.Model
	}
	sc.Engine = cfg.Engine
	sc.Engine.HashSeed = cfg.Engine.HashSeed + uint64(k) // engines need not share a seed
	sc.WorkerID = uint64(discovery.DeriveID(name))
	sc.Tokenizer = cfg.Tokenizer
	sc.Logger = wlog
	sc.Sinks = []server.EventSink{sink}
	sc.Faults = cfg.Faults
	mw, err := server.New(sc)
	if err != nil {
		sink.Close()
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		mw.CloseSinks()
		return nil, fmt.Errorf("fleet %s: %w", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fw := &FleetWorker{Name: name, sink: sink, URL: "http://" + ln.Addr().String(), Events: sink.Endpoint(0),
		Replay: sink.ReplayEndpoint(0), Topic: cfg.Topic, BlockSize: sc.Engine.BlockSize, KVBlocks: sc.Engine.NumGPUBlocks,
		Worker: mw, cancel: cancel, done: make(chan error, 1)}
	go func() { fw.done <- mw.Serve(ctx, ln) }()
	return fw, nil
}

// Stop stops the worker (gracefully: in-flight streams end) and waits for
// it; it returns what Serve returned. Idempotent.
func (w *FleetWorker) Stop() error {
	w.once.Do(func() {
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

// Static returns the worker as a static worker entry for the router.
func (w *FleetWorker) Static() discovery.StaticWorker {
	return discovery.StaticWorker{Name: w.Name, URL: w.URL, Events: w.Events, Replay: w.Replay, Topic: w.Topic,
		BlockSize: w.BlockSize, KVBlocks: uint64(w.KVBlocks)}
}

// Static returns every worker as static worker entries.
func (f *Fleet) Static() []discovery.StaticWorker {
	out := make([]discovery.StaticWorker, 0, len(f.Workers))
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
