package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/kvrouter/kvrouter/internal/replica"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// Config is everything `kvrouter serve` needs. Every field names its flag;
// docs/config.md lists them all with their defaults.
type Config struct {
	// File is the YAML file the other values were read from (--config);
	// empty means none. Default "".
	File string

	// Host is the address the HTTP front door listens on (--host).
	// Default "127.0.0.1".
	Host string
	// Port is the HTTP port (--port); 0 picks a free port. Default 8000.
	Port int
	// DataDir is where kvrouter keeps state (--data-dir): the embedded NATS
	// store and, later, index snapshots. Default "data".
	DataDir string
	// Model is the served model name (--model), accepted in requests and
	// listed on /v1/models. Default "Qwen/Qwen3-0.6B".
	Model string
	// Models are the models served besides Model, each with its own
	// tokenizer folder or none (--model's further entries:
	// NAME[=DIR],...). A model without a tokenizer still routes token-id
	// prompts exactly and text prompts by a hash of the text. Workers
	// declaring an unlisted model get a pool too (without a tokenizer).
	// Default none.
	Models []ModelSpec
	// TokenizerDir is a folder holding the model's tokenizer.json and
	// tokenizer_config.json (--tokenizer); empty uses the embedded Qwen3
	// files. Default "".
	TokenizerDir string
	// BlockSize is the KV block size in tokens every worker must share
	// (--block-size); a worker declaring another is refused loudly.
	// Default 16.
	BlockSize int
	// LogLevel is debug, info, warn or error (--log-level). Default "info".
	LogLevel string

	// Router holds the routing knobs.
	Router Router
	// Events configures KV event ingestion and worker health.
	Events Events
	// Frontend holds the HTTP front door's limits and auth.
	Frontend Frontend
	// Queue holds the admission queue and session affinity (queue.go).
	Queue Queue
	// EventPlane says how KV events and worker registrations travel.
	EventPlane EventPlane
	// Workers is the static worker list (`workers:` in the file, --worker,
	// KVROUTER_WORKER). Default none.
	Workers []fleet.StaticWorker
}

// Router holds the router core's knobs.
type Router struct {
	// Mode is the selection policy (--router-mode): kv, kv-time,
	// round-robin, random or least-loaded. Default "kv".
	Mode string
	// KVTime holds the kv-time policy's knobs (--kv-time-*).
	KVTime KVTime
	// Temperature is the softmax temperature over normalised costs
	// (--router-temperature); 0 picks the cheapest worker. Default 0.
	Temperature float64
	// OverlapScoreCredit is the cost credit, in blocks, per device block a
	// worker already holds (--kv-overlap-score-credit). Default 1.0.
	OverlapScoreCredit float64
	// PrefillLoadScale weighs prefill blocks against decode blocks
	// (--router-prefill-load-scale). Default 1.0.
	PrefillLoadScale float64
	// PrefillClamp floors the adjusted prefill blocks at zero, as the cost
	// formula in docs/design.md has it (--router-prefill-clamp). False lets them go negative, so a
	// longer cached prefix keeps lowering the cost where the credit already
	// covers the prompt (useful with a high --kv-overlap-score-credit).
	// Default true.
	PrefillClamp bool
	// TrackActiveBlocks counts the KV blocks of running requests in the
	// decode term of the cost (--router-track-active-blocks); false drops
	// that term. Default true.
	TrackActiveBlocks bool
	// HostCacheHitWeight is the credit per host-memory block beyond the
	// device prefix (--router-host-cache-hit-weight). Default 0.75.
	HostCacheHitWeight float64
	// DiskCacheHitWeight is the credit per disk block beyond the device
	// prefix (--router-disk-cache-hit-weight). Default 0.25.
	DiskCacheHitWeight float64
	// EventThreads is the number of index writer goroutines
	// (--router-event-threads). Default 4.
	EventThreads int
	// NoKVEvents ignores workers' KV events and routes every worker in
	// approximate mode (--no-router-kv-events). Default false.
	NoKVEvents bool
	// TTLSecs is how long, in seconds, an approximate-mode block stays
	// indexed after the router last sent it (--router-ttl-secs).
	// Default 120.
	TTLSecs float64
	// MaxTreeSize caps approximate-mode (worker, block) entries
	// (--router-max-tree-size). Default 1048576.
	MaxTreeSize int
	// PruneTargetRatio is the fraction of MaxTreeSize kept after a prune
	// (--router-prune-target-ratio). Default 0.8.
	PruneTargetRatio float64
	// PredictOnRoute indexes a short-lived guess that the chosen worker
	// holds the request's blocks until its stored event arrives
	// (--router-predict-on-route). Default false.
	PredictOnRoute bool
	// ActiveDecodeBlocksThreshold marks a worker busy above this fraction
	// of its KV capacity held by running requests
	// (--active-decode-blocks-threshold); 0 is off. Default 0.
	ActiveDecodeBlocksThreshold float64
	// ActivePrefillTokensThreshold marks a worker busy above this many
	// pending prefill tokens (--active-prefill-tokens-threshold); 0 is off.
	// Default 0.
	ActivePrefillTokensThreshold int
	// Seed seeds tie-breaks and sampling (--router-seed). Default 0.
	Seed uint64
	// ID stamps this router's lifecycle events for replica sync
	// (--router-id). Default 0.
	ID uint64
	// SweepInterval is how often expired bookings and approximate entries
	// are swept (--router-sweep-interval). Default 1 s.
	SweepInterval time.Duration
	// RequestExpiry frees a booking this long after it was made if its
	// Free was lost (--router-request-expiry), so a lost Free cannot hold
	// load on a worker forever; it must outlast the longest generation.
	// 0 never frees one. Default 1 h (3600 s, Dynamo's).
	RequestExpiry time.Duration
	// RequestSweepInterval is how often, at most, bookings are checked
	// against RequestExpiry (--router-request-sweep-interval): an expired
	// booking goes at the first check after it, at the next booking or
	// --router-sweep-interval tick. Positive. Default 30 s.
	RequestSweepInterval time.Duration
	// Knobs are the scheduler's and the ledger's further options
	// (--kv-overlap-score-credit-decay, --router-shared-cache-multiplier,
	// --router-decode-active-request-weight, --router-track-prefill-tokens,
	// --router-assume-kv-reuse, --router-active-sequence-stride,
	// --router-track-output-blocks), documented on Knobs.
	Knobs
}

// Events configures KV event ingestion and worker health checks.
type Events struct {
	// SilentAfter marks an event-fed worker DEGRADED when it has published
	// no event for this long while requests are running on it
	// (--kv-events-silent-after). Default 60 s.
	SilentAfter time.Duration
	// ReplayTimeout bounds one replay request to a worker's replay socket
	// (--kv-events-replay-timeout). Default 5 s.
	ReplayTimeout time.Duration
	// DialRetry is the wait between attempts to connect to a worker's event
	// endpoint (--kv-events-dial-retry). Default 250 ms.
	DialRetry time.Duration
	// ReadyTimeout is how long /ready waits for every worker's initial
	// replay before giving up on the missing ones and reporting ready
	// anyway (--ready-timeout). Default 30 s.
	ReadyTimeout time.Duration
	// HealthInterval is how often each worker's /health is probed
	// (--worker-health-interval); 0 turns probing off. Default 5 s.
	HealthInterval time.Duration
	// HealthTimeout bounds one probe (--worker-health-timeout). Default 2 s.
	HealthTimeout time.Duration
	// LoRARefresh is how often each worker's /v1/models is read to learn
	// the LoRA adapters it has loaded (--lora-refresh-interval); a worker
	// is also read when it joins and when it answers 404 to an adapter's
	// request. 0 never reads them. Default 30 s.
	LoRARefresh time.Duration
	// HealthFailures is how many failed probes in a row mark a worker DOWN
	// (--worker-health-failures). Default 2.
	HealthFailures int
}

// Event plane kinds (--event-plane).
const (
	// PlaneNATS is the default: an embedded (or external) NATS server
	// carries RouterEvents, recovery queries, the worker registry and
	// replica sync; static workers with a ZMQ endpoint are still read as
	// their engines' own vLLM streams.
	PlaneNATS = "nats"
	// PlaneZMQ carries RouterEvents without a broker: every static worker's
	// events/replay endpoints are an agent's (or mocker's) RouterEvent PUB
	// and recovery ROUTER sockets. No registry, no replica sync.
	PlaneZMQ = "zmq"
	// PlaneNone starts no event plane: static workers with a ZMQ endpoint
	// are read as their engines' own vLLM streams and nothing else.
	PlaneNone = "none"
)

// EventPlane configures the event plane: NATS (embedded or external), the
// worker registry, durable mode and replica sync.
type EventPlane struct {
	// Kind is nats, zmq or none (--event-plane). Default "nats".
	Kind string
	// NATS is the NATS server or connection (--nats-url, --nats-host,
	// --nats-port, --nats-token, --nats-user, --nats-password,
	// --nats-creds, --nats-nkey, --nats-tls-*, --nats-reconnect-wait).
	// Default: an embedded server on 127.0.0.1:4222 storing under
	// --data-dir. Its DataDir is always --data-dir.
	NATS natsbus.Config
	// Namespace is the event-plane namespace in every subject
	// (--namespace). Default "dynamo".
	Namespace string
	// Component is the event-plane component in every subject
	// (--component). Default "backend".
	Component string
	// Registry is the NATS KV bucket workers register in and its heartbeat
	// TTL (--registry-bucket, --registry-ttl). Defaults "kvrouter-workers"
	// and 10 s.
	Registry registry.RegistryConfig
	// Durable reads KV events through a JetStream durable consumer with
	// index snapshots (--durable-kv-events). Default false.
	Durable bool
	// SnapshotThreshold is the stream size, in messages, above which the
	// index is snapshotted and acknowledged messages purged
	// (--router-snapshot-threshold). Default 10000.
	SnapshotThreshold uint64
	// ResetStates purges the durable stream and snapshot at start
	// (--router-reset-states; unsafe while other routers run).
	// Default false.
	ResetStates bool
	// ReplicaSync shares active-request bookings with the other router
	// replicas over NATS (--router-replica-sync). Default false.
	ReplicaSync bool
	// ReplicaResyncInterval is how often replica sync fetches every live
	// peer's snapshot and reconciles what it holds for it, a backstop
	// for lifecycle events lost without a trace (snapshots are also
	// fetched on reconnect and on a hole in a peer's numbering)
	// (--router-replica-resync-interval); 0 turns the periodic fetch off.
	// Default 30 s.
	ReplicaResyncInterval time.Duration
}

// Frontend holds the front door's limits and auth.
type Frontend struct {
	// MaxBodyBytes caps a request body in bytes (--max-body-bytes).
	// Default 33554432 (32 MiB).
	MaxBodyBytes int64
	// MaxPromptTokens caps a prompt in tokens (--max-prompt-tokens); 0 is
	// no limit. Default 131072.
	MaxPromptTokens int
	// ForwardTokenIDs sends completions to workers as token ids
	// (--forward-token-ids). Default false.
	ForwardTokenIDs bool
	// MaxRetries is how many other workers a request is retried on when
	// the chosen one fails before its first byte (--max-retries).
	// Default 2.
	MaxRetries int
	// APIKeys are the bearer tokens accepted on the OpenAI endpoints
	// (--api-keys, comma-separated); empty leaves them open. Default none.
	APIKeys []string
	// AdminKeys are the bearer tokens accepted on the admin endpoints
	// (--admin-keys, comma-separated); empty leaves them open.
	// Default none.
	AdminKeys []string
	// ShutdownTimeout bounds how long in-flight requests may take to
	// finish on shutdown (--shutdown-timeout). Default 30 s.
	ShutdownTimeout time.Duration
	// DialTimeout bounds connecting to a worker (--worker-dial-timeout).
	// Default 2 s.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a worker's response
	// headers (--worker-response-timeout); 0 waits as long as the client.
	// Default 0.
	ResponseHeaderTimeout time.Duration
	// StreamIdleTimeout bounds each silence of a worker mid-response
	// (--worker-stream-idle-timeout): headers to first byte, chunk to
	// chunk, and a stream's headers. On expiry the client gets 504
	// worker_timeout, or an SSE error event once streaming, and the
	// booking is freed; 0 disables. Default 60 s.
	StreamIdleTimeout time.Duration
	// ReadHeaderTimeout bounds reading a client's request headers
	// (--read-header-timeout). Default 10 s.
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds reading a client's request body
	// (--body-read-timeout); 0 is no bound. Default 60 s.
	BodyReadTimeout time.Duration
	// MaxOutputTokens caps a request's max_tokens / max_completion_tokens
	// (--max-output-tokens): a value below 1 or above it gets 400 before
	// routing. In [1, 2^30]. Default 131072.
	MaxOutputTokens int
	// TokenizeConcurrency bounds how many large prompts (64 KiB of text or
	// more) are tokenized at once (--tokenize-concurrency); 0 means
	// GOMAXPROCS. Smaller prompts never wait. Default 0.
	TokenizeConcurrency int
	// TokenizeQueueTimeout bounds a large prompt's wait for a tokenizing
	// slot (--tokenize-queue-timeout); then 503 tokenizer_busy with
	// Retry-After. Default 5 s.
	TokenizeQueueTimeout time.Duration
	// WriteTimeout bounds each write to a client, one SSE event or body
	// chunk (--write-timeout): a client that does not take it in time is
	// dropped and its upstream request cancelled; 0 is no bound.
	// Default 30 s.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive client connections idle this long
	// (--idle-timeout). Default 120 s.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's headers in bytes
	// (--max-header-bytes). Default 1048576.
	MaxHeaderBytes int
	// PD is disaggregated serving: --pd-protocol (vllm or sglang,
	// default vllm), --pd-bypass-tokens (tokens, default 0: never skip
	// the prefill hop), --pd-prefill-timeout (default 60 s).
	PD frontend.PDConfig
	// TLSCertFile and TLSKeyFile are a PEM certificate (chain) and key
	// for serving HTTPS (--tls-cert-file, --tls-key-file); both or
	// neither. Default "" (plain HTTP).
	TLSCertFile string
	TLSKeyFile  string
}

// Default returns the documented defaults.
func Default() Config {
	rc := router.DefaultConfig()
	ic := index.DefaultConfig()
	fc := frontend.DefaultConfig()
	sc := scheduler.DefaultConfig()
	pc := natsevents.DefaultPublisherConfig()
	return Config{
		Host:      "127.0.0.1",
		Port:      8000,
		DataDir:   "data",
		Model:     modelfiles.DefaultModel,
		BlockSize: rc.BlockSize,
		LogLevel:  "info",
		Router: Router{
			Mode:               rc.Policy,
			OverlapScoreCredit: sc.OverlapScoreCredit,
			PrefillLoadScale:   sc.PrefillLoadScale,
			PrefillClamp:       sc.PrefillClamp,
			TrackActiveBlocks:  rc.Sequences.TrackActiveBlocks,
			HostCacheHitWeight: sc.HostCacheHitWeight,
			DiskCacheHitWeight: sc.DiskCacheHitWeight,
			EventThreads:       liveindex.DefaultConfig().Writers,
			TTLSecs:            ic.ApproxTTL.Seconds(),
			MaxTreeSize:        ic.ApproxMaxBlocks,
			PruneTargetRatio:   ic.PruneRatio,
			SweepInterval:      time.Second,

			RequestExpiry:        rc.Sequences.Expiry,
			RequestSweepInterval: rc.Sequences.ExpirySweep,
			Knobs:                defaultKnobs(rc),
			KVTime:               defaultKVTime(),
		},
		Events: Events{
			SilentAfter:    60 * time.Second,
			ReplayTimeout:  5 * time.Second,
			DialRetry:      250 * time.Millisecond,
			ReadyTimeout:   30 * time.Second,
			HealthInterval: 5 * time.Second,
			HealthTimeout:  2 * time.Second,
			LoRARefresh:    30 * time.Second,
			HealthFailures: 2,
		},
		EventPlane: EventPlane{
			Kind:                  PlaneNATS,
			NATS:                  natsbus.DefaultConfig(),
			Namespace:             pc.Namespace,
			Component:             pc.Component,
			Registry:              registry.DefaultRegistryConfig(),
			SnapshotThreshold:     durable.DefaultConfig().SnapshotThreshold,
			ReplicaResyncInterval: replica.DefaultConfig().ResyncInterval,
		},
		Frontend: Frontend{
			MaxBodyBytes:    fc.MaxBodyBytes,
			MaxPromptTokens: fc.MaxPromptTokens,
			MaxRetries:      fc.MaxRetries,
			ShutdownTimeout: fc.ShutdownTimeout,
			DialTimeout:     fc.DialTimeout,

			StreamIdleTimeout: fc.StreamIdleTimeout,

			ReadHeaderTimeout: fc.ReadHeaderTimeout,
			BodyReadTimeout:   fc.BodyReadTimeout,
			WriteTimeout:      fc.WriteTimeout,

			MaxOutputTokens:      fc.MaxOutputTokens,
			TokenizeConcurrency:  fc.TokenizeConcurrency,
			TokenizeQueueTimeout: fc.TokenizeQueueTimeout,
			IdleTimeout:          fc.IdleTimeout,
			MaxHeaderBytes:       fc.MaxHeaderBytes,
			PD:                   fc.PD,
		},
		Queue: defaultQueue(),
	}
}

// ErrInvalid wraps every error Validate and Load report about values.
var ErrInvalid = errors.New("invalid configuration")

// Validate checks the whole configuration once, including what the router
// core, the index and the front door will be built from, so a bad value is
// reported before anything starts.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	var lvl slog.Level
	switch {
	case c.Host == "" || (net.ParseIP(c.Host) == nil && !validHostname(c.Host)):
		return bad("--host %q is not an IP address or host name", c.Host)
	case c.Port < 0 || c.Port > 65535:
		return bad("--port %d out of range [0, 65535]", c.Port)
	case c.DataDir == "":
		return bad("--data-dir is empty")
	case c.Model == "":
		return bad("--model is empty")
	case checkModels(c.Model, c.Models) != nil:
		return bad("--model: %v", checkModels(c.Model, c.Models))
	case c.BlockSize <= 0 || c.BlockSize > 1<<16:
		return bad("--block-size %d out of range [1, 65536]", c.BlockSize)
	case lvl.UnmarshalText([]byte(c.LogLevel)) != nil:
		return bad("--log-level %q: want debug, info, warn or error", c.LogLevel)
	case c.Router.EventThreads < 1 || c.Router.EventThreads > 256:
		return bad("--router-event-threads %d out of range [1, 256]", c.Router.EventThreads)
	case !(c.Router.TTLSecs > 0) || math.IsInf(c.Router.TTLSecs, 0) || c.Router.TTLSecs > 1e6:
		return bad("--router-ttl-secs %v must be in (0, 1e6]", c.Router.TTLSecs)
	case c.Router.SweepInterval <= 0:
		return bad("--router-sweep-interval %v must be positive", c.Router.SweepInterval)
	case c.Router.RequestExpiry < 0:
		return bad("--router-request-expiry %v is negative (0 never expires a booking)", c.Router.RequestExpiry)
	case c.Router.RequestSweepInterval <= 0:
		return bad("--router-request-sweep-interval %v must be positive", c.Router.RequestSweepInterval)
	case c.Events.SilentAfter <= 0:
		return bad("--kv-events-silent-after %v must be positive", c.Events.SilentAfter)
	case c.Events.ReplayTimeout <= 0:
		return bad("--kv-events-replay-timeout %v must be positive", c.Events.ReplayTimeout)
	case c.Events.DialRetry <= 0:
		return bad("--kv-events-dial-retry %v must be positive", c.Events.DialRetry)
	case c.Events.ReadyTimeout < 0:
		return bad("--ready-timeout %v is negative", c.Events.ReadyTimeout)
	case c.Events.HealthInterval < 0:
		return bad("--worker-health-interval %v is negative", c.Events.HealthInterval)
	case c.Events.LoRARefresh < 0:
		return bad("--lora-refresh-interval %v is negative", c.Events.LoRARefresh)
	case c.Events.HealthTimeout <= 0:
		return bad("--worker-health-timeout %v must be positive", c.Events.HealthTimeout)
	case c.Events.HealthFailures < 1:
		return bad("--worker-health-failures %d must be at least 1", c.Events.HealthFailures)
	case (c.Frontend.TLSCertFile == "") != (c.Frontend.TLSKeyFile == ""):
		return bad("--tls-cert-file and --tls-key-file go together")
	}
	if err := c.Router.Knobs.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.EventPlane.validate(c.DataDir, c.Router.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.RouterConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.IndexConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.Queue.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.FrontendConfig().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := c.WorkerRecords(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// Addr is the front door's listen address, host:port.
func (c Config) Addr() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// Level returns the parsed log level (info when invalid; Validate reports
// that).
func (c Config) Level() slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(c.LogLevel)) != nil {
		return slog.LevelInfo
	}
	return l
}

// RouterConfig is the router core's configuration.
func (c Config) RouterConfig() router.Config {
	rc := router.DefaultConfig()
	rc.RouterID = c.Router.ID
	rc.BlockSize = c.BlockSize
	rc.Policy = c.Router.Mode
	rc.PredictOnRoute = c.Router.PredictOnRoute
	rc.Seed = c.Router.Seed
	s := &rc.Scheduler
	s.Temperature = c.Router.Temperature
	s.OverlapScoreCredit = c.Router.OverlapScoreCredit
	s.PrefillLoadScale = c.Router.PrefillLoadScale
	s.PrefillClamp = c.Router.PrefillClamp
	s.HostCacheHitWeight = c.Router.HostCacheHitWeight
	s.DiskCacheHitWeight = c.Router.DiskCacheHitWeight
	s.ActiveDecodeBlocksThreshold = c.Router.ActiveDecodeBlocksThreshold
	s.ActivePrefillTokensThreshold = c.Router.ActivePrefillTokensThreshold
	rc.Sequences.BlockSize = c.BlockSize
	rc.Sequences.TrackActiveBlocks = c.Router.TrackActiveBlocks
	c.Router.Knobs.apply(&rc)
	rc.Sequences.Expiry = c.Router.RequestExpiry
	rc.Sequences.ExpirySweep = c.Router.RequestSweepInterval
	c.Router.KVTime.apply(&rc)
	return rc
}

// IndexConfig is the concurrent prefix index's configuration.
func (c Config) IndexConfig() liveindex.Config {
	ic := liveindex.DefaultConfig()
	ic.Writers = c.Router.EventThreads
	ic.Index.ApproxTTL = time.Duration(c.Router.TTLSecs * float64(time.Second))
	ic.Index.ApproxMaxBlocks = c.Router.MaxTreeSize
	ic.Index.PruneRatio = c.Router.PruneTargetRatio
	return ic
}

// FrontendConfig is the front door's configuration.
func (c Config) FrontendConfig() frontend.Config {
	fc := frontend.DefaultConfig()
	fc.Model = c.Model
	fc.MaxBodyBytes = c.Frontend.MaxBodyBytes
	fc.MaxPromptTokens = c.Frontend.MaxPromptTokens
	fc.ForwardTokenIDs = c.Frontend.ForwardTokenIDs
	fc.MaxRetries = c.Frontend.MaxRetries
	fc.APIKeys = c.Frontend.APIKeys
	fc.AdminKeys = c.Frontend.AdminKeys
	fc.ShutdownTimeout = c.Frontend.ShutdownTimeout
	fc.DialTimeout = c.Frontend.DialTimeout
	fc.ResponseHeaderTimeout = c.Frontend.ResponseHeaderTimeout
	fc.StreamIdleTimeout = c.Frontend.StreamIdleTimeout
	fc.ReadHeaderTimeout = c.Frontend.ReadHeaderTimeout
	fc.BodyReadTimeout = c.Frontend.BodyReadTimeout
	fc.MaxOutputTokens = c.Frontend.MaxOutputTokens
	fc.TokenizeConcurrency = c.Frontend.TokenizeConcurrency
	fc.TokenizeQueueTimeout = c.Frontend.TokenizeQueueTimeout
	fc.WriteTimeout = c.Frontend.WriteTimeout
	fc.IdleTimeout = c.Frontend.IdleTimeout
	fc.MaxHeaderBytes = c.Frontend.MaxHeaderBytes
	fc.PD = c.Frontend.PD
	c.Queue.apply(&fc)
	return fc
}

// WorkerRecords turns the static list into validated worker records, with
// --block-size standing in for a worker's absent block size.
func (c Config) WorkerRecords() ([]fleet.WorkerRecord, error) {
	return fleet.BuildStatic(c.Workers, c.BlockSize, fleet.DefaultHashContract())
}

// validate checks the event plane's values and combinations.
func (e EventPlane) validate(dataDir string, routerID uint64) error {
	switch e.Kind {
	case PlaneNATS, PlaneZMQ, PlaneNone:
	default:
		return fmt.Errorf("--event-plane %q: want nats, zmq or none", e.Kind)
	}
	if e.Kind != PlaneNATS {
		switch {
		case e.ReplicaSync:
			return fmt.Errorf("--router-replica-sync needs --event-plane nats: replicas share their bookings over NATS, and --event-plane %s has none", e.Kind)
		case e.Durable:
			return fmt.Errorf("--durable-kv-events needs --event-plane nats (JetStream), not %s", e.Kind)
		}
		return nil
	}
	if !validSubjectToken(e.Namespace) {
		return fmt.Errorf("--namespace %q: want a non-empty NATS subject token (no dots, spaces or wildcards)", e.Namespace)
	}
	if !validSubjectToken(e.Component) {
		return fmt.Errorf("--component %q: want a non-empty NATS subject token (no dots, spaces or wildcards)", e.Component)
	}
	if e.Durable && routerID == 0 {
		return errors.New("--durable-kv-events needs --router-id: it names this router's durable consumer, which must be stable across restarts and distinct per replica")
	}
	if e.ReplicaResyncInterval < 0 {
		return errors.New("--router-replica-resync-interval must not be negative (0 turns the periodic resync off)")
	}
	if e.SnapshotThreshold == 0 {
		return errors.New("--router-snapshot-threshold must be at least 1")
	}
	nc := e.NATS
	nc.DataDir = dataDir
	if err := nc.Validate(); err != nil {
		return err
	}
	return e.Registry.Validate()
}

func validSubjectToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}

// NATSConfig is the NATS connection's configuration, storing under
// --data-dir.
func (c Config) NATSConfig() natsbus.Config {
	nc := c.EventPlane.NATS
	nc.DataDir = c.DataDir
	return nc
}

// DurableConfig is the durable consumer's configuration; routerID names
// this router's durable consumer.
func (c Config) DurableConfig(routerID uint64) durable.Config {
	dc := durable.DefaultConfig()
	dc.Namespace, dc.Component = c.EventPlane.Namespace, c.EventPlane.Component
	dc.RouterID = strconv.FormatUint(routerID, 10)
	dc.SnapshotThreshold = c.EventPlane.SnapshotThreshold
	dc.ResetStates = c.EventPlane.ResetStates
	dc.Replicas = c.EventPlane.NATS.Replicas
	return dc
}
