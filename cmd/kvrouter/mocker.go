package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

func init() {
	register("mocker", command{summary: "run mock vLLM workers (no GPU): OpenAI API, KV events, vLLM metrics", run: runMocker})
}

// mockerFlags are the flags of `kvrouter mocker`, named as `vllm serve`
// and Dynamo's mocker name them.
type mockerFlags struct {
	host, kvEvents, encoding, schema, replayFormat, tok, logLevel string
	port, numWorkers                                              int
	noPrefixCaching                                               bool
	bandwidthGBs                                                  float64
	workerID                                                      uint64
	cfg                                                           server.Config
	eventPlane                                                    string
	nats                                                          mockerNATS
}

func newMockerFlagSet(stderr io.Writer) (*flag.FlagSet, *mockerFlags) {
	f := &mockerFlags{cfg: server.DefaultConfig()}
	e := &f.cfg.Engine
	fs := flag.NewFlagSet("mocker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.host, "host", "0.0.0.0", "address to listen on")
	fs.IntVar(&f.port, "port", 8000, "HTTP port of the first worker (0: a free port each)")
	fs.IntVar(&f.numWorkers, "num-workers", 1, "independent workers in this process, on consecutive ports")
	fs.StringVar(&f.cfg.Model, "model", f.cfg.Model, "model name or path")
	fs.StringVar(&f.cfg.ServedModelName, "served-model-name", "", "model name clients use (default: --model)")
	fs.IntVar(&f.cfg.MaxModelLen, "max-model-len", 0, "max prompt + output tokens (0: what the KV cache holds)")
	fs.IntVar(&f.cfg.DataParallelSize, "data-parallel-size", 1, "engine ranks per worker, each with its own KV cache, scheduler and event stream")
	fs.Uint64Var(&f.workerID, "worker-id", 0, "worker id of the first worker in its KV events (then +1 per worker)")
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "tokens per KV block")
	fs.IntVar(&e.NumGPUBlocks, "num-gpu-blocks-override", e.NumGPUBlocks, "device KV blocks per rank")
	fs.IntVar(&e.NumCPUBlocks, "num-cpu-blocks", 0, "host-memory offload blocks per rank (0: no offload tier)")
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "max running requests per rank")
	fs.IntVar(&e.MaxNumBatchedTokens, "max-num-batched-tokens", e.MaxNumBatchedTokens, "max tokens computed per step")
	fs.Float64Var(&e.Watermark, "watermark", e.Watermark, "fraction of KV blocks kept free when admitting")
	fs.BoolVar(&e.EnablePrefixCaching, "enable-prefix-caching", true, "cache and reuse prompt prefixes")
	fs.BoolVar(&f.noPrefixCaching, "no-enable-prefix-caching", false, "turn prefix caching off")
	fs.Float64Var(&e.SpeedupRatio, "speedup-ratio", 1, "divide every modelled duration by this")
	fs.Float64Var(&e.DecodeSpeedupRatio, "decode-speedup-ratio", 1, "further divide decode steps by this")
	fs.Float64Var(&f.bandwidthGBs, "kv-transfer-bandwidth", 64, "host-to-device KV transfer bandwidth, GB/s")
	fs.IntVar(&e.KVBytesPerToken, "kv-bytes-per-token", e.KVBytesPerToken, "KV cache bytes per token")
	fs.Uint64Var(&e.HashSeed, "hash-seed", e.HashSeed, "seed of the engine's own block hashes (then +1 per worker)")
	fs.StringVar(&f.kvEvents, "kv-events-config", "", `vLLM KV events JSON, e.g. '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5657","topic":"kv-events"}'`)
	fs.StringVar(&f.encoding, "kv-events-encoding", "map", "event encoding: map (vLLM >= mid-2026) or array (older vLLM, SGLang)")
	fs.StringVar(&f.schema, "kv-events-schema", "", "array field set (v0.9, medium, lora_name, extra_keys, group_idx, spec_kind; default newest)")
	fs.StringVar(&f.replayFormat, "kv-events-replay-format", "topic", "replay reply shape: topic (vLLM after June 2026) or legacy")
	fs.StringVar(&f.tok, "tokenizer", "words", "prompt tokenizer: words (whitespace stand-in) or qwen3 (embedded BPE)")
	fs.Float64Var(&f.cfg.Faults.DropEvents, "fault-drop-events", 0, "probability an event batch is not sent live (still replayable)")
	fs.Float64Var(&f.cfg.Faults.DuplicateEvents, "fault-duplicate-events", 0, "probability an event batch is sent twice")
	fs.DurationVar(&f.cfg.Faults.DelayEvents, "fault-delay-events", 0, "delay every event batch by this")
	fs.IntVar(&f.cfg.Faults.RestartEventsEvery, "fault-restart-events-every", 0, "restart the event sequence every N batches (0: never)")
	fs.IntVar(&f.cfg.Faults.CrashAfter, "fault-crash-after", 0, "crash a worker after it served N requests (0: never)")
	fs.Uint64Var(&f.cfg.Faults.Seed, "fault-seed", 1, "seed of the fault dice")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.eventPlane, "event-plane", "zmq", "zmq: vLLM ZMQ events per --kv-events-config; nats: Dynamo RouterEvents on NATS (--nats-url) with recovery and registration; dynamo-zmq: RouterEvents on a ZMQ PUB at the kv-events endpoint, recovery on a ROUTER at the replay endpoint")
	f.nats.bindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: kvrouter mocker [flags]")
		fmt.Fprintln(stderr, "Runs simulated vLLM workers that need no GPU. Worker k listens on --port + k; its")
		fmt.Fprintln(stderr, "rank r publishes KV events on the endpoint port + k*data-parallel-size + r.")
		fs.PrintDefaults()
	}
	return fs, f
}

func runMocker(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	fs, f := newMockerFlagSet(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvrouter mocker: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return fail("unexpected arguments %q", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fail("--log-level: %v", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if f.noPrefixCaching {
		f.cfg.Engine.EnablePrefixCaching = false
	}
	f.cfg.Engine.KVTransferBandwidth = f.bandwidthGBs * 1e9
	if f.numWorkers < 1 || f.numWorkers > 1024 {
		return fail("--num-workers %d out of range [1, 1024]", f.numWorkers)
	}
	if f.port < 0 || f.port+f.numWorkers-1 > 65535 {
		return fail("--port %d with %d workers out of range", f.port, f.numWorkers)
	}
	switch f.tok {
	case "words":
	case "qwen3":
		t, err := tokenizer.Default()
		if err != nil {
			return fail("loading the Qwen3 tokenizer: %v", err)
		}
		f.cfg.Tokenizer = t
	default:
		return fail("--tokenizer %q: want words or qwen3", f.tok)
	}
	ev := server.DefaultKVEventsConfig()
	if f.kvEvents != "" {
		var err error
		if ev, err = server.ParseKVEventsConfig(f.kvEvents); err != nil {
			return fail("--kv-events-config: %v", err)
		}
	}
	zopts, err := server.ParseZMQOptions(f.encoding, f.schema, f.replayFormat)
	if err != nil {
		return fail("%v", err)
	}

	if f.eventPlane != "zmq" && f.eventPlane != "nats" && f.eventPlane != "dynamo-zmq" {
		return fail("--event-plane %q: want zmq, nats or dynamo-zmq", f.eventPlane)
	}
	if f.eventPlane == "nats" {
		if err := f.nats.start(ctx, log); err != nil {
			return fail("%v", err)
		}
		defer f.nats.close()
	}
	var natsSinks []*server.NATSSink
	var workers []*server.Worker
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
		for _, w := range workers {
			w.CloseSinks()
		}
	}
	for k := range f.numWorkers {
		cfg := f.cfg
		cfg.WorkerID = f.workerID + uint64(k)
		cfg.Engine.HashSeed = f.cfg.Engine.HashSeed + uint64(k)
		cfg.Logger = log.With("worker", k)
		if f.eventPlane == "nats" {
			sink, err := f.nats.sink(cfg)
			if err != nil {
				closeAll()
				return fail("worker %d: %v", k, err)
			}
			cfg.Sinks = []server.EventSink{sink}
			natsSinks = append(natsSinks, sink)
		} else if f.eventPlane == "dynamo-zmq" {
			sink, ep, qep, err := mockerDynamoZMQSink(ev, k, cfg)
			if err != nil {
				closeAll()
				return fail("worker %d: %v", k, err)
			}
			cfg.Sinks = []server.EventSink{sink}
			natsSinks = append(natsSinks, sink)
			cfg.Logger.Info("router events over ZMQ", "events", ep, "replay", qep)
		} else if ev.Enabled() {
			sink, err := server.NewZMQSink(ev, zopts, k*cfg.DataParallelSize, cfg.DataParallelSize, cfg.Logger)
			if err != nil {
				closeAll()
				return fail("worker %d: %v", k, err)
			}
			cfg.Sinks = []server.EventSink{sink}
			for r := range cfg.DataParallelSize {
				cfg.Logger.Info("kv events", "dp_rank", r, "endpoint", sink.Endpoint(r), "replay_endpoint", sink.ReplayEndpoint(r),
					"topic", ev.Topic, "encoding", f.encoding)
			}
		}
		w, err := server.New(cfg)
		if err != nil {
			for _, s := range cfg.Sinks {
				s.Close()
			}
			closeAll()
			return fail("worker %d: %v", k, err)
		}
		workers = append(workers, w)
		port := 0
		if f.port != 0 {
			port = f.port + k
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(port)))
		if err != nil {
			closeAll()
			return fail("worker %d: %v", k, err)
		}
		lns = append(lns, ln)
		if f.eventPlane == "dynamo-zmq" {
			if err := natsSinks[k].Serve(w); err != nil {
				closeAll()
				return fail("worker %d: %v", k, err)
			}
		}
		if f.eventPlane == "nats" {
			host, port, _ := net.SplitHostPort(ln.Addr().String())
			if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
				host = "127.0.0.1"
			}
			if err := f.nats.serve(ctx, natsSinks[k], w, cfg, "http://"+net.JoinHostPort(host, port)); err != nil {
				closeAll()
				return fail("worker %d: %v", k, err)
			}
		}
	}
	var wg sync.WaitGroup
	codes := make([]int, len(workers))
	for k, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Serve(ctx, lns[k]); err != nil {
				log.Error("worker stopped", "worker", k, "err", err)
				codes[k] = 1
			}
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != 0 {
			return 1
		}
	}
	return 0
}
