package config

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/agent"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/indexbench"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/loadgen"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/kvrouter/kvrouter/internal/sim"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// The configurations of the subcommands other than serve. Each is loaded
// by LoadCommand like serve's: defaults, --config YAML, KVROUTER_* env,
// flags; validated once. docs/config.md lists every option of each with
// its unit and default.

var (
	_ Command = (*Config)(nil)
	_ Command = (*Up)(nil)
	_ Command = (*Agent)(nil)
	_ Command = (*Mocker)(nil)
	_ Command = (*Sim)(nil)
	_ Command = (*BenchOnline)(nil)
	_ Command = (*BenchIndex)(nil)
	_ Command = (*Hash)(nil)
)

func (c *Config) setFile(f string) { c.File = f }

// Commands returns every subcommand's configuration with its defaults,
// by the name Options.Name takes ("serve", "bench online", ...): for
// documentation and for telling a variable another subcommand reads from a
// misspelt one.
func Commands() map[string]Command {
	u, a, m := DefaultUp(), DefaultAgent(), DefaultMocker()
	s, bo, bi, h := DefaultSim(), DefaultBenchOnline(), DefaultBenchIndex(), DefaultHash()
	c := Default()
	return map[string]Command{"serve": &c, "up": &u, "agent": &a, "mocker": &m, "sim": &s,
		"bench online": &bo, "bench index": &bi, "hash": &h}
}

// knownEnv is every KVROUTER_ variable some subcommand reads.
func knownEnv() map[string]bool {
	known := map[string]bool{EnvName("config"): true}
	for _, c := range Commands() {
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		c.Bind(fs)
		fs.VisitAll(func(f *flag.Flag) { known[EnvName(f.Name)] = true })
	}
	return known
}

// validLevel reports a --log-level that is not debug, info, warn or error.
func validLevel(s string) error {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return nil
}

// ParseLevel returns the log level of a validated --log-level (info when
// invalid).
func ParseLevel(s string) slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(s)) != nil {
		return slog.LevelInfo
	}
	return l
}

// Up is `kvrouter up`: every serve option but the static worker list,
// plus the mock fleet it starts.
type Up struct {
	// Config is the router's configuration; Workers stays empty.
	Config
	// MockWorkers is how many mock workers to start (--mock-workers; the
	// older --workers is the same). Default 4, at most 256.
	MockWorkers int
	// NoNATS is --event-plane none, kept for older scripts (--no-nats).
	// Default false.
	NoNATS bool
	// Engine is the mock engines' model: --speedup-ratio (×),
	// --num-gpu-blocks-override (blocks), --max-num-seqs (requests),
	// --max-num-batched-tokens (tokens), --long-prefill-token-threshold
	// (tokens per request per step, 0 off); the block size is --block-size.
	// Defaults those of the mock engine.
	Engine mocker.Config
	// Fleet varies the engines per worker: --worker-speeds (×),
	// --worker-batch-tokens (tokens), --worker-kv-blocks (blocks), each
	// one value per worker or one for all. Default empty.
	Fleet mocker.Fleet
	// PrefillWorkers and DecodeWorkers make the fleet disaggregated
	// (--prefill-workers, --decode-workers): that many mock prefill and
	// decode workers, speaking --pd-protocol, instead of --mock-workers
	// aggregated ones. Defaults 0.
	PrefillWorkers, DecodeWorkers int
}

// DefaultUp returns up's documented defaults.
func DefaultUp() Up { return Up{Config: Default(), MockWorkers: 4, Engine: mocker.DefaultConfig()} }

// Bind registers up's flags: serve's without --worker, and the fleet's.
func (u *Up) Bind(fs *flag.FlagSet) {
	u.Config.bindRouter(fs)
	fs.IntVar(&u.MockWorkers, "mock-workers", u.MockWorkers, "mock workers to start, on free loopback ports")
	fs.IntVar(&u.MockWorkers, "workers", u.MockWorkers, "older name of --mock-workers")
	fs.BoolVar(&u.NoNATS, "no-nats", u.NoNATS, "same as --event-plane none (kept for older scripts)")
	fs.Float64Var(&u.Engine.SpeedupRatio, "speedup-ratio", u.Engine.SpeedupRatio, "divide the mock engines' modelled step times by this")
	fs.IntVar(&u.Engine.NumGPUBlocks, "num-gpu-blocks-override", u.Engine.NumGPUBlocks, "device KV blocks per mock worker")
	fs.IntVar(&u.Engine.MaxNumSeqs, "max-num-seqs", u.Engine.MaxNumSeqs, "max running requests per mock worker")
	fs.IntVar(&u.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", u.Engine.MaxNumBatchedTokens, "max tokens per mock engine step")
	fs.IntVar(&u.Engine.LongPrefillTokenThreshold, "long-prefill-token-threshold", u.Engine.LongPrefillTokenThreshold, "max tokens one request computes per mock engine step, as vLLM's --long-prefill-token-threshold (0: no cap)")
	bindFleet(fs, &u.Fleet)
	bindUpPD(fs, u)

	fs.Var(&modelsValue{&u.Config}, "models", "models the mock workers serve, NAME[=DIR],... (the same list as --model): worker k serves model k mod N; model i's block size is --block-size × 2^i")
}

// Validate checks the fleet and the router it runs.
func (u *Up) Validate() error {
	if u.NoNATS && (u.EventPlane.ReplicaSync || u.EventPlane.Durable) {
		return errors.New("--no-nats contradicts --router-replica-sync and --durable-kv-events (both need NATS)")
	}
	if err := u.validatePD(); err != nil {
		return err
	}
	if u.MockWorkers < 1 || u.MockWorkers > 256 {
		return fmt.Errorf("--mock-workers %d out of range [1, 256]", u.MockWorkers)
	}
	if len(u.Workers) > 0 {
		return errors.New("up runs its own mock workers; use 'kvrouter serve' with --worker for real ones")
	}
	if n := 1 + len(u.Models); u.MockWorkers < n {
		return fmt.Errorf("--mock-workers %d: fewer than the %d models", u.MockWorkers, n)
	}
	if u.BlockSize<<len(u.Models) > 1<<16 {
		return fmt.Errorf("--block-size %d doubled for each of %d more models exceeds 65536", u.BlockSize, len(u.Models))
	}
	e := u.FleetEngine()
	if err := e.Validate(); err != nil {
		return fmt.Errorf("mock engine: %w", err)
	}
	if err := checkFleet(u.Fleet, u.FleetWorkers(), "--mock-workers"); err != nil {
		return err
	}
	if err := u.Fleet.Validate(e, u.FleetWorkers()); err != nil {
		return fmt.Errorf("mock engine: %w", err)
	}
	return u.Router().Validate()
}

// Router is the router's configuration, --no-nats applied.
func (u *Up) Router() Config {
	c := u.Config
	if u.NoNATS {
		c.EventPlane.Kind = PlaneNone
	}
	return c
}

// FleetModels is the models the mock workers serve with their block
// sizes: the default model at --block-size, each further one at twice the
// one before (so that no two share a block size); nil for one model.
func (u *Up) FleetModels() (names []string, blockSizes []int) {
	if len(u.Models) == 0 {
		return nil, nil
	}
	names, blockSizes = []string{u.Model}, []int{u.BlockSize}
	for i, m := range u.Models {
		names = append(names, m.Name)
		blockSizes = append(blockSizes, u.BlockSize<<(i+1))
	}
	return names, blockSizes
}

// FleetEngine is the mock engines' configuration, with the router's block
// size.
func (u *Up) FleetEngine() mocker.Config {
	e := u.Engine
	e.BlockSize = u.BlockSize
	return e
}

// Agent is `kvrouter agent`, the sidecar next to a real engine.
type Agent struct {
	// Core is the agent's own configuration: --name, --url, --model,
	// --block-size (tokens, default 16), --kv-capacity-blocks (blocks, 0
	// unknown), --max-num-batched-tokens (tokens, 0 unknown),
	// --kv-events-endpoint (default tcp://127.0.0.1:5557),
	// --kv-events-replay-endpoint, --kv-events-topic, --namespace,
	// --component, --bare-events, --event-buffer (events),
	// --publish-endpoint, --query-endpoint.
	Core agent.Config
	// WorkerID is the worker id in KV events (--worker-id); 0 derives it
	// from --name. Default 0.
	WorkerID uint64
	// DPStart and DPSize are the engine's first data-parallel rank and its
	// rank count (--data-parallel-start-rank, --data-parallel-size).
	// Defaults 0 and 1.
	DPStart, DPSize uint
	// HashContract is the block hashing contract of the published local
	// hashes (--hash-contract). Default the router's.
	HashContract string
	// EventPlane is nats or zmq (--event-plane). Default "nats".
	EventPlane string
	// NoRegister skips the NATS registry (--no-register). Default false.
	NoRegister bool
	// Durable makes sure the JetStream stream of durable routers exists
	// (--durable-kv-events). Default false.
	Durable bool
	// LogLevel is debug, info, warn or error (--log-level). Default "info".
	LogLevel string
	// NATS is the connection (--nats-url, default nats://127.0.0.1:4222;
	// --nats-token etc., best from the environment).
	NATS natsbus.Config
	// Registry is the worker registry bucket and heartbeat TTL.
	Registry registry.RegistryConfig
	// Role is the engine's part in a disaggregated fleet: prefill, decode
	// or both (--role). Default "both".
	Role string
	// BootstrapPort is an SGLang prefill engine's KV bootstrap port
	// (--bootstrap-port). Default 0 (none).
	BootstrapPort int
}

// DefaultAgent returns agent's documented defaults.
func DefaultAgent() Agent {
	a := Agent{Core: agent.DefaultConfig(), DPSize: 1, HashContract: fleet.DefaultHashContract().String(),
		Role: string(fleet.RoleBoth), EventPlane: PlaneNATS, LogLevel: "info", NATS: natsbus.DefaultConfig(), Registry: registry.DefaultRegistryConfig()}
	a.Core.Record.BlockSize = Default().BlockSize
	a.Core.Endpoint = "tcp://127.0.0.1:5557"
	a.Core.ZMQ.Endpoint, a.Core.ZMQ.QueryEndpoint = "tcp://*:5600", "tcp://*:5601"
	a.NATS.URL, a.NATS.Name = "nats://127.0.0.1:4222", "kvrouter-agent"
	return a
}

// Bind registers agent's flags.
func (a *Agent) Bind(fs *flag.FlagSet) {
	c := &a.Core
	fs.StringVar(&c.Record.Name, "name", c.Record.Name, "worker name, unique in the fleet (required)")
	fs.Uint64Var(&a.WorkerID, "worker-id", a.WorkerID, "worker id in KV events (0: derived from --name)")
	fs.StringVar(&c.Record.URL, "url", c.Record.URL, "engine's OpenAI-compatible HTTP base URL, e.g. http://10.0.0.5:8000 (required)")
	fs.StringVar(&c.Record.Model, "model", c.Record.Model, "served model name")
	fs.IntVar(&c.Record.BlockSize, "block-size", c.Record.BlockSize, "engine KV block size in tokens")
	fs.UintVar(&a.DPStart, "data-parallel-start-rank", a.DPStart, "first data-parallel rank of the engine")
	fs.UintVar(&a.DPSize, "data-parallel-size", a.DPSize, "data-parallel ranks of the engine (rank r publishes on endpoint port + r)")
	fs.Uint64Var(&c.Record.KVCapacityBlocks, "kv-capacity-blocks", c.Record.KVCapacityBlocks, "engine KV cache size in blocks (0: unknown)")
	fs.Uint64Var(&c.Record.MaxBatchedTokens, "max-num-batched-tokens", c.Record.MaxBatchedTokens, "engine max batched tokens per step (0: unknown)")
	fs.StringVar(&c.Endpoint, "kv-events-endpoint", c.Endpoint, "engine ZMQ PUB endpoint of the first rank")
	fs.StringVar(&c.Replay, "kv-events-replay-endpoint", c.Replay, "engine ZMQ replay endpoint of the first rank (empty: none)")
	fs.StringVar(&c.Topic, "kv-events-topic", c.Topic, "ZMQ topic filter (empty: everything)")
	fs.StringVar(&c.Publisher.Namespace, "namespace", c.Publisher.Namespace, "event-plane namespace")
	fs.StringVar(&c.Publisher.Component, "component", c.Publisher.Component, "event-plane component")
	fs.BoolVar(&c.Publisher.Bare, "bare-events", c.Publisher.Bare, "publish bare RouterEvents instead of Dynamo's envelope")
	fs.IntVar(&c.BufferEvents, "event-buffer", c.BufferEvents, "events kept for recovery queries")
	fs.StringVar(&a.HashContract, "hash-contract", a.HashContract, "block hashing contract of the published local hashes")
	fs.StringVar(&a.EventPlane, "event-plane", a.EventPlane, "nats: RouterEvents on NATS; zmq: RouterEvents on a ZMQ PUB (--publish-endpoint) with recovery on a ROUTER (--query-endpoint), no NATS")
	fs.StringVar(&c.ZMQ.Endpoint, "publish-endpoint", c.ZMQ.Endpoint, "ZMQ PUB endpoint for RouterEvents (--event-plane zmq)")
	fs.StringVar(&c.ZMQ.QueryEndpoint, "query-endpoint", c.ZMQ.QueryEndpoint, "ZMQ ROUTER endpoint answering recovery queries (--event-plane zmq)")
	fs.BoolVar(&a.NoRegister, "no-register", a.NoRegister, "do not register the worker in the NATS KV registry")
	fs.BoolVar(&a.Durable, "durable-kv-events", a.Durable, "make sure the JetStream stream keeping the events exists (routers in durable mode)")
	fs.StringVar(&a.LogLevel, "log-level", a.LogLevel, "debug, info, warn or error")
	fs.StringVar(&a.Role, "role", a.Role, "the engine's part in a disaggregated fleet: prefill, decode or both")
	fs.IntVar(&a.BootstrapPort, "bootstrap-port", a.BootstrapPort, "an SGLang prefill engine's KV bootstrap port (0: none)")
	a.NATS.BindFlags(fs)
	a.Registry.BindFlags(fs)
}

// Validate checks the agent's options; AgentConfig builds from them.
func (a *Agent) Validate() error {
	if err := validLevel(a.LogLevel); err != nil {
		return err
	}
	switch a.EventPlane {
	case PlaneZMQ:
	case PlaneNATS:
		if a.NATS.URL == "" {
			return errors.New("--nats-url is required (the agent connects to the router's or the fleet's NATS)")
		}
	default:
		return fmt.Errorf("--event-plane %q: want nats or zmq", a.EventPlane)
	}
	if a.Core.Record.URL == "" {
		return errors.New("--url is required")
	}
	if a.DPSize < 1 || a.DPSize > 1<<16 || a.DPStart > math.MaxUint32-a.DPSize {
		return fmt.Errorf("--data-parallel-start-rank %d / --data-parallel-size %d out of range", a.DPStart, a.DPSize)
	}
	if _, err := fleet.ParseHashContract(a.HashContract); err != nil {
		return fmt.Errorf("--hash-contract: %w", err)
	}
	if a.Durable && a.EventPlane != PlaneNATS {
		return errors.New("--durable-kv-events needs --event-plane nats (JetStream)")
	}
	c, err := a.AgentConfig()
	if err != nil {
		return err
	}
	return c.Validate()
}

// AgentConfig is the agent's configuration with the derived values filled
// in: the worker id, the ranks, the hash contract and the transport.
func (a *Agent) AgentConfig() (agent.Config, error) {
	c := a.Core
	h, err := fleet.ParseHashContract(a.HashContract)
	if err != nil {
		return c, fmt.Errorf("--hash-contract: %w", err)
	}
	c.Record.Hash = h
	c.Record.ID = fleet.DeriveID(c.Record.Name)
	if a.WorkerID != 0 {
		c.Record.ID = kvevent.WorkerID(a.WorkerID)
	}
	c.Record.DPStart, c.Record.DPSize = uint32(a.DPStart), uint32(a.DPSize)
	if c.Record.Role, err = fleet.ParseRole(a.Role); err != nil {
		return c, fmt.Errorf("--role: %w", err)
	}
	c.Record.BootstrapPort = a.BootstrapPort
	switch a.EventPlane {
	case PlaneZMQ:
		c.Register = false
	default:
		c.ZMQ.Endpoint, c.ZMQ.QueryEndpoint = "", ""
		c.Register = c.Register && !a.NoRegister
	}
	return c, nil
}

// Mocker event planes (--event-plane of `kvrouter mocker`).
const (
	// MockerZMQ publishes vLLM's own ZMQ KV events (--kv-events-config).
	MockerZMQ = "zmq"
	// MockerNATS publishes RouterEvents on NATS and registers each worker.
	MockerNATS = "nats"
	// MockerDynamoZMQ publishes RouterEvents on a ZMQ PUB with recovery
	// on a ROUTER (what `kvrouter agent --event-plane zmq` does).
	MockerDynamoZMQ = "dynamo-zmq"
)

// Mocker is `kvrouter mocker`: simulated vLLM workers. Its defaults pair
// with serve's: the same block size, loopback, and a first port next to
// the router's.
type Mocker struct {
	// Host is the address the workers listen on (--host). Default
	// "127.0.0.1".
	Host string
	// Port is the first worker's HTTP port (--port); worker k listens on
	// Port + k; 0 picks a free port each. Default 8001 (the router's is
	// 8000).
	Port int
	// NumWorkers is how many workers run in the process (--num-workers).
	// Default 1, at most 1024.
	NumWorkers int
	// Server is each worker's configuration: --model, --served-model-name,
	// --lora-adapters (the LoRA adapters it has loaded),
	// --max-model-len (tokens), --data-parallel-size, --worker-id, the
	// engine (--block-size in tokens, default 16 like serve's;
	// --num-gpu-blocks-override, --num-cpu-blocks in blocks;
	// --max-num-seqs; --max-num-batched-tokens in tokens;
	// --long-prefill-token-threshold in tokens, 0 off; --watermark, a
	// fraction; --speedup-ratio, --decode-speedup-ratio, ×;
	// --kv-bytes-per-token in bytes; --hash-seed) and the fault
	// injection (--fault-*).
	Server server.Config
	// NoPrefixCaching turns prefix caching off (--no-enable-prefix-caching).
	// Default false.
	NoPrefixCaching bool
	// KVTransferBandwidthGBs is the host-to-device KV transfer bandwidth
	// in GB/s (--kv-transfer-bandwidth). Default 64.
	KVTransferBandwidthGBs float64
	// KVEventsConfig is vLLM's KV events JSON (--kv-events-config); empty
	// uses the mock's default endpoints. Default "".
	KVEventsConfig string
	// KVEventsEncoding is map or array (--kv-events-encoding). Default "map".
	KVEventsEncoding string
	// KVEventsSchema is the array field set (--kv-events-schema); empty is
	// the newest. Default "".
	KVEventsSchema string
	// KVEventsReplayFormat is topic or legacy (--kv-events-replay-format).
	// Default "topic".
	KVEventsReplayFormat string
	// Tokenizer is words or qwen3 (--tokenizer). Default "words".
	Tokenizer string
	// LogLevel is debug, info, warn or error (--log-level). Default "info".
	LogLevel string
	// EventPlane is zmq, nats or dynamo-zmq (--event-plane). Default "zmq".
	EventPlane string
	// NATS is the connection for --event-plane nats (--nats-url, default
	// nats://127.0.0.1:4222, and the --nats-* options).
	NATS natsbus.Config
	// Registry is the worker registry bucket and heartbeat TTL
	// (--event-plane nats).
	Registry registry.RegistryConfig
	// Namespace and Component are the event-plane subject tokens
	// (--namespace, --component). Defaults "dynamo" and "backend".
	Namespace, Component string
	// Durable makes sure the JetStream stream of durable routers exists
	// (--durable-kv-events). Default false.
	Durable bool
	// Fleet varies the workers' engines: --worker-speeds (×),
	// --worker-batch-tokens (tokens), --worker-kv-blocks (blocks), each
	// one value per worker or one for all. Default empty.
	Fleet mocker.Fleet
}

// DefaultMocker returns mocker's documented defaults.
func DefaultMocker() Mocker {
	m := Mocker{Host: "127.0.0.1", Port: Default().Port + 1, NumWorkers: 1, Server: server.DefaultConfig(),
		KVTransferBandwidthGBs: 64, KVEventsEncoding: "map", KVEventsReplayFormat: "topic", Tokenizer: "words",
		LogLevel: "info", EventPlane: MockerZMQ, NATS: natsbus.DefaultConfig(), Registry: registry.DefaultRegistryConfig()}
	m.Server.Engine.BlockSize = Default().BlockSize
	m.Server.Engine.EnablePrefixCaching = true
	m.Server.Faults.Seed = 1
	m.NATS.URL, m.NATS.Name = "nats://127.0.0.1:4222", "kvrouter-mocker"
	pc := natsevents.DefaultPublisherConfig()
	m.Namespace, m.Component = pc.Namespace, pc.Component
	return m
}

// Bind registers mocker's flags, named as `vllm serve` and Dynamo's
// mocker name them.
func (m *Mocker) Bind(fs *flag.FlagSet) {
	s, e := &m.Server, &m.Server.Engine
	fs.StringVar(&m.Host, "host", m.Host, "address to listen on (0.0.0.0: every interface)")
	fs.IntVar(&m.Port, "port", m.Port, "HTTP port of the first worker (0: a free port each)")
	fs.IntVar(&m.NumWorkers, "num-workers", m.NumWorkers, "independent workers in this process, on consecutive ports")
	fs.StringVar(&s.Model, "model", s.Model, "model name or path")
	fs.StringVar(&s.ServedModelName, "served-model-name", s.ServedModelName, "model name clients use (default: --model)")
	fs.Var((*listValue)(&s.LoRAAdapters), "lora-adapters", "comma-separated LoRA adapter names the workers have loaded: listed on /v1/models, accepted as a request's model, their blocks hashed apart")
	fs.IntVar(&s.MaxModelLen, "max-model-len", s.MaxModelLen, "max prompt + output tokens (0: what the KV cache holds)")
	fs.IntVar(&s.DataParallelSize, "data-parallel-size", s.DataParallelSize, "engine ranks per worker, each with its own KV cache, scheduler and event stream")
	fs.Uint64Var(&s.WorkerID, "worker-id", s.WorkerID, "worker id of the first worker in its KV events (then +1 per worker)")
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "tokens per KV block (serve's default too)")
	fs.IntVar(&e.NumGPUBlocks, "num-gpu-blocks-override", e.NumGPUBlocks, "device KV blocks per rank")
	fs.IntVar(&e.NumCPUBlocks, "num-cpu-blocks", e.NumCPUBlocks, "host-memory offload blocks per rank (0: no offload tier)")
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "max running requests per rank")
	fs.IntVar(&e.MaxNumBatchedTokens, "max-num-batched-tokens", e.MaxNumBatchedTokens, "max tokens computed per step")
	fs.IntVar(&e.LongPrefillTokenThreshold, "long-prefill-token-threshold", e.LongPrefillTokenThreshold, "max tokens one request computes per step, prefill chunks capped as vLLM's (0: no cap)")
	fs.Float64Var(&e.Watermark, "watermark", e.Watermark, "fraction of KV blocks kept free when admitting")
	fs.BoolVar(&e.EnablePrefixCaching, "enable-prefix-caching", e.EnablePrefixCaching, "cache and reuse prompt prefixes")
	fs.BoolVar(&m.NoPrefixCaching, "no-enable-prefix-caching", m.NoPrefixCaching, "turn prefix caching off")
	fs.Float64Var(&e.SpeedupRatio, "speedup-ratio", e.SpeedupRatio, "divide every modelled duration by this")
	fs.Float64Var(&e.DecodeSpeedupRatio, "decode-speedup-ratio", e.DecodeSpeedupRatio, "further divide decode steps by this")
	fs.Float64Var(&m.KVTransferBandwidthGBs, "kv-transfer-bandwidth", m.KVTransferBandwidthGBs, "host-to-device KV transfer bandwidth, GB/s")
	fs.IntVar(&e.KVBytesPerToken, "kv-bytes-per-token", e.KVBytesPerToken, "KV cache bytes per token")
	fs.Uint64Var(&e.HashSeed, "hash-seed", e.HashSeed, "seed of the engine's own block hashes (then +1 per worker)")
	fs.StringVar(&m.KVEventsConfig, "kv-events-config", m.KVEventsConfig, `vLLM KV events JSON, e.g. '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5657","topic":"kv-events"}'`)
	fs.StringVar(&m.KVEventsEncoding, "kv-events-encoding", m.KVEventsEncoding, "event encoding: map (vLLM >= mid-2026) or array (older vLLM, SGLang)")
	fs.StringVar(&m.KVEventsSchema, "kv-events-schema", m.KVEventsSchema, "array field set (v0.9, medium, lora_name, extra_keys, group_idx, spec_kind; default newest)")
	fs.StringVar(&m.KVEventsReplayFormat, "kv-events-replay-format", m.KVEventsReplayFormat, "replay reply shape: topic (vLLM after June 2026) or legacy")
	fs.StringVar(&m.Tokenizer, "tokenizer", m.Tokenizer, "prompt tokenizer: words (whitespace stand-in) or qwen3 (embedded BPE)")
	f := &s.Faults
	fs.Float64Var(&f.DropEvents, "fault-drop-events", f.DropEvents, "probability an event batch is not sent live (still replayable)")
	fs.Float64Var(&f.DuplicateEvents, "fault-duplicate-events", f.DuplicateEvents, "probability an event batch is sent twice")
	fs.DurationVar(&f.DelayEvents, "fault-delay-events", f.DelayEvents, "delay every event batch by this")
	fs.IntVar(&f.RestartEventsEvery, "fault-restart-events-every", f.RestartEventsEvery, "restart the event sequence every N batches (0: never)")
	fs.IntVar(&f.CrashAfter, "fault-crash-after", f.CrashAfter, "crash a worker after it served N requests (0: never)")
	fs.Uint64Var(&f.Seed, "fault-seed", f.Seed, "seed of the fault dice")
	bindDisagg(fs, &m.Server.Disagg)
	fs.StringVar(&m.LogLevel, "log-level", m.LogLevel, "debug, info, warn or error")
	fs.StringVar(&m.EventPlane, "event-plane", m.EventPlane, "zmq: vLLM ZMQ events per --kv-events-config; nats: Dynamo RouterEvents on NATS (--nats-url) with recovery and registration; dynamo-zmq: RouterEvents on a ZMQ PUB at the kv-events endpoint, recovery on a ROUTER at the replay endpoint")
	fs.StringVar(&m.Namespace, "namespace", m.Namespace, "event-plane namespace (--event-plane nats)")
	fs.StringVar(&m.Component, "component", m.Component, "event-plane component (--event-plane nats)")
	fs.BoolVar(&m.Durable, "durable-kv-events", m.Durable, "make sure the JetStream stream keeping the events exists (--event-plane nats, routers in durable mode)")
	bindFleet(fs, &m.Fleet)
	m.NATS.BindFlags(fs)
	m.Registry.BindFlags(fs)
}

// Validate checks the mocker's options, including what each worker will
// be built from.
func (m *Mocker) Validate() error {
	if err := validLevel(m.LogLevel); err != nil {
		return err
	}
	switch {
	case m.Host == "" || (net.ParseIP(m.Host) == nil && !validHostname(m.Host)):
		return fmt.Errorf("--host %q is not an IP address or host name", m.Host)
	case m.NumWorkers < 1 || m.NumWorkers > 1024:
		return fmt.Errorf("--num-workers %d out of range [1, 1024]", m.NumWorkers)
	case m.Port < 0 || m.Port+m.NumWorkers-1 > 65535:
		return fmt.Errorf("--port %d with %d workers out of range", m.Port, m.NumWorkers)
	case m.Tokenizer != "words" && m.Tokenizer != "qwen3":
		return fmt.Errorf("--tokenizer %q: want words or qwen3", m.Tokenizer)
	case !(m.KVTransferBandwidthGBs > 0) || math.IsInf(m.KVTransferBandwidthGBs, 0):
		return fmt.Errorf("--kv-transfer-bandwidth %v must be a positive number of GB/s", m.KVTransferBandwidthGBs)
	}
	switch m.EventPlane {
	case MockerZMQ, MockerDynamoZMQ:
		if m.Durable {
			return errors.New("--durable-kv-events needs --event-plane nats (JetStream)")
		}
	case MockerNATS:
		if m.NATS.URL == "" {
			return errors.New("--event-plane nats needs --nats-url")
		}
		if !validSubjectToken(m.Namespace) || !validSubjectToken(m.Component) {
			return fmt.Errorf("--namespace %q / --component %q: want non-empty NATS subject tokens", m.Namespace, m.Component)
		}
	default:
		return fmt.Errorf("--event-plane %q: want zmq, nats or dynamo-zmq", m.EventPlane)
	}
	ev, err := m.KVEvents()
	if err != nil {
		return err
	}
	if m.EventPlane == MockerDynamoZMQ && (ev.Endpoint == "" || ev.ReplayEndpoint == "") {
		return errors.New("--event-plane dynamo-zmq needs endpoint and replay_endpoint in --kv-events-config")
	}
	if _, err := m.ZMQOptions(); err != nil {
		return err
	}
	if err := checkFleet(m.Fleet, m.NumWorkers, "--num-workers"); err != nil {
		return err
	}
	if err := m.Fleet.Validate(m.ServerConfig().Engine, m.NumWorkers); err != nil {
		return err
	}
	return m.ServerConfig().Validate()
}

// KVEvents is the parsed --kv-events-config (the mock's default endpoints
// when empty).
func (m *Mocker) KVEvents() (server.KVEventsConfig, error) {
	if m.KVEventsConfig == "" {
		return server.DefaultKVEventsConfig(), nil
	}
	ev, err := server.ParseKVEventsConfig(m.KVEventsConfig)
	if err != nil {
		return ev, fmt.Errorf("--kv-events-config: %w", err)
	}
	return ev, nil
}

// ZMQOptions are the --kv-events-encoding/-schema/-replay-format options.
func (m *Mocker) ZMQOptions() (server.ZMQOptions, error) {
	return server.ParseZMQOptions(m.KVEventsEncoding, m.KVEventsSchema, m.KVEventsReplayFormat)
}

// ServerConfig is the first worker's configuration (worker k adds k to
// the worker id and the hash seed).
func (m *Mocker) ServerConfig() server.Config {
	s := m.Server
	if m.NoPrefixCaching {
		s.Engine.EnablePrefixCaching = false
	}
	s.Engine.KVTransferBandwidth = m.KVTransferBandwidthGBs * 1e9
	return s
}

// Sim is `kvrouter sim`: the offline fleet simulator.
type Sim struct {
	// Sim is the fleet: --workers (default 8), the engines' --block-size
	// (tokens), --num-gpu-blocks (blocks), --speedup-ratio (×),
	// --max-num-seqs, --max-num-batched-tokens (tokens), the router's
	// cost knobs and --seed.
	Sim sim.Config
	// Workload is the workload (--workload and its options).
	Workload workload.Options
	// Policies is the comma-separated list of policies compared
	// (--policy). Default "kv,round-robin,random,least-loaded".
	Policies string
	// JSON prints results as JSON (--json). Default false.
	JSON bool
	// PlotDir is where PNG plots are written (--plot); empty writes none.
	PlotDir string
	// Grid is --grid and its options (simgrid.go).
	Grid SimGrid
	// Queue models the admission queue (the --router-queue-* and
	// --router-tenant-* flags that apply offline).
	Queue Queue
	// SLO is the TTFT a request must meet to count in the goodput line
	// (--slo-ttft). Default 2 s.
	SLO time.Duration
}

// DefaultSim returns sim's documented defaults.
func DefaultSim() Sim {
	return Sim{Sim: sim.DefaultConfig(), Workload: workload.DefaultOptions(), Policies: "kv,round-robin,random,least-loaded",
		Grid: SimGrid{Parallel: 1}, Queue: defaultQueue(), SLO: 2 * time.Second}
}

// Bind registers sim's flags.
func (s *Sim) Bind(fs *flag.FlagSet) {
	cfg := &s.Sim
	s.Workload.RegisterFlags(fs)
	fs.StringVar(&s.Policies, "policy", s.Policies, "comma-separated policies: kv, kv-time, round-robin, random, least-loaded, oracle (diagnostic: longest real cached prefix, no load term)")
	bindKVTime(fs, &cfg.Router.KVTime.Tolerance, &cfg.Router.KVTime.DecodeWeight, &cfg.Router.KVTime.RecomputeWeight, &cfg.Router.KVTime.ITLWeight, &cfg.Router.TimeModel.HalfLife)
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of mock engines")
	fs.IntVar(&cfg.Engine.BlockSize, "block-size", cfg.Engine.BlockSize, "KV block size in tokens")
	fs.IntVar(&cfg.Engine.NumGPUBlocks, "num-gpu-blocks", cfg.Engine.NumGPUBlocks, "KV blocks per engine")
	fs.Float64Var(&cfg.Engine.SpeedupRatio, "speedup-ratio", cfg.Engine.SpeedupRatio, "divide every modelled engine duration")
	fs.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "max running requests per engine")
	fs.IntVar(&cfg.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.Engine.MaxNumBatchedTokens, "token budget per engine step")
	fs.IntVar(&cfg.Engine.LongPrefillTokenThreshold, "long-prefill-token-threshold", cfg.Engine.LongPrefillTokenThreshold, "max tokens one request computes per engine step, as vLLM's --long-prefill-token-threshold (0: no cap)")
	fs.Float64Var(&cfg.Router.Scheduler.Temperature, "router-temperature", cfg.Router.Scheduler.Temperature, "kv policy softmax temperature (0: argmin)")
	fs.Float64Var(&cfg.Router.Scheduler.OverlapScoreCredit, "kv-overlap-score-credit", cfg.Router.Scheduler.OverlapScoreCredit, "credit per cached block")
	fs.Float64Var(&cfg.Router.Scheduler.PrefillLoadScale, "router-prefill-load-scale", cfg.Router.Scheduler.PrefillLoadScale, "weight of prefill load")
	fs.BoolVar(&cfg.Router.Scheduler.PrefillClamp, "router-prefill-clamp", cfg.Router.Scheduler.PrefillClamp, "floor the adjusted prefill blocks at 0 (docs/design.md, the cost formula); false lets a longer cached prefix keep lowering the cost at high credit")
	fs.BoolVar(&cfg.Router.Sequences.TrackActiveBlocks, "router-track-active-blocks", cfg.Router.Sequences.TrackActiveBlocks, "count running requests' KV blocks in the kv cost (the decode load term)")
	bindSimKnobs(fs, &cfg.Router)
	fs.BoolVar(&cfg.Approximate, "no-router-kv-events", cfg.Approximate, "workers publish no KV events (approximate index)")
	bindSimPD(fs, cfg)
	fs.Uint64Var(&cfg.Router.Seed, "seed", cfg.Router.Seed, "router seed (tie-breaks, random policy)")
	fs.BoolVar(&s.JSON, "json", s.JSON, "print results as JSON (one object per policy)")
	fs.StringVar(&s.PlotDir, "plot", s.PlotDir, "write PNG plots into this directory")
	bindFleet(fs, &cfg.Fleet)
	fs.Var((*speedSchedule)(&cfg.SpeedChanges), "worker-speed-change", "change the workers' speeds mid-run: TIME=SPEEDS separated by ';' (virtual time from the workload's start; SPEEDS as --worker-speeds), e.g. '120s=0.5,0.5,1,1,1,1,1,1'")
	s.Grid.bind(fs)
	s.Queue.bindSim(fs)
	bindSimThresholds(fs, &cfg.Router.Scheduler)
	fs.DurationVar(&s.SLO, "slo-ttft", s.SLO, "TTFT a request must meet to count as goodput")
}

// PolicyList is --policy split and trimmed.
func (s *Sim) PolicyList() []string {
	var ps []string
	for p := range strings.SplitSeq(s.Policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			ps = append(ps, p)
		}
	}
	return ps
}

// Validate checks the fleet, the workload kind and the policies.
func (s *Sim) Validate() error {
	s.Sim.Workers = simWorkers(s.Sim)
	if err := checkFleet(s.Sim.Fleet, s.Sim.Workers, "--workers"); err != nil {
		return err
	}
	if err := checkSchedule(s.Sim.SpeedChanges, s.Sim.Workers); err != nil {
		return err
	}
	if err := s.Grid.validate(s.Sim.Workers); err != nil {
		return err
	}
	if err := s.SimConfig().Validate(); err != nil {
		return err
	}
	if err := s.Queue.validate(); err != nil {
		return err
	}
	if len(s.PolicyList()) == 0 {
		return errors.New("--policy names no policy")
	}
	return validWorkload(&s.Workload)
}

func validWorkload(o *workload.Options) error {
	switch o.Kind {
	case workload.KindTrace, workload.KindPrefixRatio, workload.KindSharedPrefix, workload.KindMultiTurn:
		return nil
	}
	return fmt.Errorf("--workload %q: want trace, prefix-ratio, shared-prefix or multi-turn", o.Kind)
}

// BenchOnline is `kvrouter bench online`: a workload against an OpenAI
// endpoint.
type BenchOnline struct {
	// Load is the load generator: --url (default http://127.0.0.1:8000),
	// --model, --api, --closed-loop (requests in flight), --duration,
	// --max-requests, --max-conns, --request-timeout, --api-key.
	Load loadgen.Config
	// Workload is the workload (--workload and its options).
	Workload workload.Options
	// Text sends prompts as text (--text). Default false.
	Text bool
	// Name labels the result row (--name). Default "online".
	Name string
	// BoundWorkers, BoundBlocks and BoundBlockSize size the shared-LRU
	// hit-ratio bound: workers (--bound-workers, 0 no bound), KV blocks
	// per worker (--bound-num-gpu-blocks, default 16384) and tokens per
	// block (--bound-block-size, default 64).
	BoundWorkers, BoundBlocks, BoundBlockSize int
	// JSON prints the result as JSON (--json). Default false.
	JSON bool
	// PlotDir is where PNG plots are written (--plot); empty writes none.
	PlotDir string
}

// DefaultBenchOnline returns bench online's documented defaults.
func DefaultBenchOnline() BenchOnline {
	lc := loadgen.DefaultConfig()
	lc.URL = "http://127.0.0.1:8000"
	return BenchOnline{Load: lc, Workload: workload.DefaultOptions(), Name: "online", BoundBlocks: 16384, BoundBlockSize: 64}
}

// Bind registers bench online's flags.
func (b *BenchOnline) Bind(fs *flag.FlagSet) {
	lc := &b.Load
	b.Workload.RegisterFlags(fs)
	fs.StringVar(&lc.URL, "url", lc.URL, "server base URL (kvrouter, a worker, or any OpenAI server)")
	fs.StringVar(&lc.Model, "model", lc.Model, "model name sent with each request")
	fs.StringVar(&lc.API, "api", lc.API, "completions (token-id prompts) or chat (text prompts)")
	fs.BoolVar(&b.Text, "text", b.Text, "send prompts as text (decoded with the embedded Qwen3 tokenizer) instead of token ids")
	fs.IntVar(&lc.Concurrency, "closed-loop", lc.Concurrency, "closed loop with this many requests in flight (0: the workload's arrival times)")
	fs.DurationVar(&lc.Duration, "duration", lc.Duration, "stop issuing and cancel what is in flight after this wall time (0: none)")
	fs.IntVar(&lc.MaxRequests, "max-requests", lc.MaxRequests, "send at most this many requests (0: the whole workload)")
	fs.IntVar(&lc.MaxConns, "max-conns", lc.MaxConns, "bound on the client's connections to the server")
	fs.DurationVar(&lc.RequestTimeout, "request-timeout", lc.RequestTimeout, "bound on one request (0: none)")
	fs.StringVar(&lc.APIKey, "api-key", lc.APIKey, "bearer token, if the server wants one (best from KVROUTER_API_KEY)")
	fs.StringVar(&b.Name, "name", b.Name, "label of the result row")
	fs.IntVar(&b.BoundWorkers, "bound-workers", b.BoundWorkers, "compute the shared-LRU bound for this many workers (0: no bound)")
	fs.IntVar(&b.BoundBlocks, "bound-num-gpu-blocks", b.BoundBlocks, "KV blocks per worker, for the bound")
	fs.IntVar(&b.BoundBlockSize, "bound-block-size", b.BoundBlockSize, "KV block size in tokens, for the bound")
	fs.BoolVar(&b.JSON, "json", b.JSON, "print the result as JSON")
	fs.StringVar(&b.PlotDir, "plot", b.PlotDir, "write PNG plots into this directory")
}

// NeedsText reports whether prompts go as text (--text or the chat API).
func (b *BenchOnline) NeedsText() bool { return b.Text || b.Load.API == loadgen.APIChat }

// Validate checks the load generator, the bound and the workload kind.
func (b *BenchOnline) Validate() error {
	lc := b.Load
	if b.NeedsText() {
		lc.Text = func([]uint32) string { return "" } // the real decoder is the command's
	}
	if err := lc.Validate(); err != nil {
		return err
	}
	if b.BoundWorkers < 0 || (b.BoundWorkers > 0 && (b.BoundBlocks < 1 || b.BoundBlockSize < 1)) {
		return fmt.Errorf("--bound-workers %d, --bound-num-gpu-blocks %d, --bound-block-size %d: want non-negative workers and positive sizes",
			b.BoundWorkers, b.BoundBlocks, b.BoundBlockSize)
	}
	if b.Name == "" {
		return errors.New("--name is empty")
	}
	return validWorkload(&b.Workload)
}

// BenchIndex is `kvrouter bench index`: the prefix index under a
// replayed trace.
type BenchIndex struct {
	// Trace is the Mooncake trace, an embedded name or a file (--trace).
	// Default "conversation".
	Trace string
	// Stream sizes the workload: --block-size (tokens, default 64),
	// --workers (default 64), --worker-blocks (blocks, default 16384),
	// --requests (trace rows, 0 all), --passes (replays of the trace with
	// new block ids, default 1).
	Stream indexbench.Config
	// Run sets the measurement: --queries (default 20000), --writers
	// (goroutines, default 4).
	Run indexbench.RunConfig
	// JSON prints one JSON object (--json). Default false.
	JSON bool
}

// DefaultBenchIndex returns bench index's documented defaults.
func DefaultBenchIndex() BenchIndex {
	return BenchIndex{Trace: "conversation", Stream: indexbench.DefaultConfig(), Run: indexbench.DefaultRunConfig()}
}

// Bind registers bench index's flags.
func (b *BenchIndex) Bind(fs *flag.FlagSet) {
	fs.StringVar(&b.Trace, "trace", b.Trace, "Mooncake trace: an embedded name (conversation, synthetic) or a file path")
	fs.IntVar(&b.Stream.BlockSize, "block-size", b.Stream.BlockSize, "engine KV block size in tokens")
	fs.IntVar(&b.Stream.Workers, "workers", b.Stream.Workers, "number of simulated workers")
	fs.IntVar(&b.Stream.WorkerBlocks, "worker-blocks", b.Stream.WorkerBlocks, "KV cache capacity of each worker in blocks (LRU)")
	fs.IntVar(&b.Stream.MaxRequests, "requests", b.Stream.MaxRequests, "use only the first N trace rows (0 = all)")
	fs.IntVar(&b.Stream.Passes, "passes", b.Stream.Passes, "replay the trace this many times, each pass with new block ids (fills a large fleet's caches)")
	fs.IntVar(&b.Run.Queries, "queries", b.Run.Queries, "number of individually timed queries")
	fs.IntVar(&b.Run.Writers, "writers", b.Run.Writers, "writer goroutines of the concurrent index")
	fs.BoolVar(&b.JSON, "json", b.JSON, "print one JSON object instead of a table")
}

// Validate checks the workload and the measurement.
func (b *BenchIndex) Validate() error {
	if err := b.Stream.Validate(); err != nil {
		return err
	}
	if b.Run.Queries <= 0 || b.Run.Writers <= 0 || b.Run.Writers > 256 {
		return errors.New("--queries must be positive and --writers in [1, 256]")
	}
	if b.Trace == "" {
		return errors.New("--trace is empty")
	}
	return nil
}

// Hash is `kvrouter hash`: block hashes of token ids.
type Hash struct {
	// BlockSize is the tokens per block (--block-size). Default 16, like
	// serve's.
	BlockSize int
	// LoRAName salts the local hash seed (--lora-name). Default "".
	LoRAName string
	// Namespace salts the local hash seed (--namespace). Default "".
	Namespace string
	// JSON prints one JSON object (--json). Default false.
	JSON bool
}

// DefaultHash returns hash's documented defaults.
func DefaultHash() Hash { return Hash{BlockSize: Default().BlockSize} }

// Bind registers hash's flags.
func (h *Hash) Bind(fs *flag.FlagSet) {
	fs.IntVar(&h.BlockSize, "block-size", h.BlockSize, "tokens per KV block")
	fs.StringVar(&h.LoRAName, "lora-name", h.LoRAName, "LoRA adapter name (salts the local hash seed)")
	fs.StringVar(&h.Namespace, "namespace", h.Namespace, "cache namespace (salts the local hash seed)")
	fs.BoolVar(&h.JSON, "json", h.JSON, `print {"block_size":N,"local":[...],"sequence":[...]}`)
}

// Validate checks the block size.
func (h *Hash) Validate() error {
	if h.BlockSize <= 0 || h.BlockSize > 1<<16 {
		return fmt.Errorf("--block-size must be a positive number of tokens, at most 65536 (got %s)", strconv.Itoa(h.BlockSize))
	}
	return nil
}
