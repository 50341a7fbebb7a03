package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

const mockerSummary = "Run simulated vLLM workers that need no GPU: the OpenAI API, KV events and vLLM's metrics, for testing a router."

func init() {
	register("mocker", command{summary: mockerSummary, run: runMocker})
}

var mockerUsage = helpText(mockerSummary, "kvrouter mocker [flags]",
	`Worker k listens on --port + k; its rank r publishes KV events on the endpoint port +
k*data-parallel-size + r. The defaults pair with 'kvrouter serve': block size 16, loopback, and
a first port (8001) next to the router's 8000.`)

// mockFleet is what runMocker started: one listener per worker, and the
// NATS connection when the workers publish there.
type mockFleet struct {
	m       config.Mocker
	log     *slog.Logger
	nats    *mockerNATS
	ev      server.KVEventsConfig
	zopts   server.ZMQOptions
	workers []*server.Worker
	lns     []net.Listener
	sinks   []*server.NATSSink // per worker, for nats and dynamo-zmq
}

func runMocker(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	m, _, code, ok := load[config.Mocker]("mocker", mockerUsage, args, config.DefaultMocker, stdout, stderr)
	if !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvrouter mocker: "+format+"\n", a...)
		return 1
	}
	f := &mockFleet{m: m, log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: config.ParseLevel(m.LogLevel)}))}
	var err error
	if f.ev, err = m.KVEvents(); err != nil { // validated already
		return fail("%v", err)
	}
	if f.zopts, err = m.ZMQOptions(); err != nil {
		return fail("%v", err)
	}
	base := m.ServerConfig()
	if m.Tokenizer == "qwen3" {
		t, err := tokenizer.Default()
		if err != nil {
			return fail("loading the Qwen3 tokenizer: %v", err)
		}
		base.Tokenizer = t
	}
	if m.EventPlane == config.MockerNATS {
		f.nats = newMockerNATS(m)
		if err := f.nats.start(ctx, f.log); err != nil {
			return fail("%v", err)
		}
		defer f.nats.close()
	}
	for k := range m.NumWorkers {
		if err := f.start(ctx, k, base); err != nil {
			f.close()
			return fail("worker %d: %v", k, err)
		}
	}
	return f.serve(ctx)
}

// start builds worker k with its event sink, listens on its port and, on
// the NATS plane, registers it.
func (f *mockFleet) start(ctx context.Context, k int, base server.Config) error {
	cfg := base
	cfg.WorkerID = base.WorkerID + uint64(k)
	cfg.Engine = f.m.Fleet.Engine(base.Engine, k)
	cfg.Engine.HashSeed = base.Engine.HashSeed + uint64(k)
	if base.Disagg.BootstrapPort > 0 {
		cfg.Disagg.BootstrapPort = base.Disagg.BootstrapPort + k
	}
	cfg.Logger = f.log.With("worker", k)
	sink, err := f.sink(k, cfg)
	if err != nil {
		return err
	}
	if sink != nil {
		cfg.Sinks = []server.EventSink{sink}
	}
	w, err := server.New(cfg)
	if err != nil {
		for _, s := range cfg.Sinks {
			s.Close()
		}
		return err
	}
	f.workers = append(f.workers, w)
	port := 0
	if f.m.Port != 0 {
		port = f.m.Port + k
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(f.m.Host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	f.lns = append(f.lns, ln)
	switch f.m.EventPlane {
	case config.MockerDynamoZMQ:
		return f.sinks[k].Serve(w)
	case config.MockerNATS:
		host, p, _ := net.SplitHostPort(ln.Addr().String())
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		return f.nats.serve(ctx, f.sinks[k], w, cfg, "http://"+net.JoinHostPort(host, p))
	}
	return nil
}

// sink is worker k's event sink for the chosen plane (nil: no events).
func (f *mockFleet) sink(k int, cfg server.Config) (server.EventSink, error) {
	switch f.m.EventPlane {
	case config.MockerNATS:
		s, err := f.nats.sink(cfg)
		if err != nil {
			return nil, err
		}
		f.sinks = append(f.sinks, s)
		return s, nil
	case config.MockerDynamoZMQ:
		s, ep, qep, err := mockerDynamoZMQSink(f.ev, k, cfg)
		if err != nil {
			return nil, err
		}
		f.sinks = append(f.sinks, s)
		cfg.Logger.Info("router events over ZMQ", "events", ep, "replay", qep)
		return s, nil
	}
	if !f.ev.Enabled() {
		return nil, nil
	}
	s, err := server.NewZMQSink(f.ev, f.zopts, k*cfg.DataParallelSize, cfg.DataParallelSize, cfg.Logger)
	if err != nil {
		return nil, err
	}
	for r := range cfg.DataParallelSize {
		cfg.Logger.Info("kv events", "dp_rank", r, "endpoint", s.Endpoint(r), "replay_endpoint", s.ReplayEndpoint(r),
			"topic", f.ev.Topic, "encoding", f.m.KVEventsEncoding)
	}
	return s, nil
}

// serve runs every worker until ctx ends; 1 when one of them failed.
func (f *mockFleet) serve(ctx context.Context) int {
	var wg sync.WaitGroup
	codes := make([]int, len(f.workers))
	for k, w := range f.workers {
		wg.Go(func() {
			if err := w.Serve(ctx, f.lns[k]); err != nil {
				f.log.Error("worker stopped", "worker", k, "err", err)
				codes[k] = 1
			}
		})
	}
	wg.Wait()
	for _, c := range codes {
		if c != 0 {
			return 1
		}
	}
	return 0
}

// close releases what start built when a later worker fails to start.
func (f *mockFleet) close() {
	for _, ln := range f.lns {
		ln.Close()
	}
	for _, w := range f.workers {
		w.CloseSinks()
	}
}
