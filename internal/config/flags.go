package config

import (
	"flag"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Bind registers every option as a flag on fs, writing into c, whose
// current values are shown as the defaults. The flag names are the YAML
// keys and, in upper snake case after KVROUTER_, the environment variables.
func (c *Config) Bind(fs *flag.FlagSet) {
	c.bindRouter(fs)
	fs.Var((*fleet.WorkerFlags)(&c.Workers), "worker",
		"static worker, repeatable: name=w1,url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,block-size=16,dp-size=1,topic=kv")
}

// bindRouter registers every option but the static worker list.
func (c *Config) bindRouter(fs *flag.FlagSet) {
	fs.StringVar(&c.File, "config", c.File, "YAML config file; its keys are these flag names (env KVROUTER_CONFIG)")
	fs.StringVar(&c.Host, "host", c.Host, "address the HTTP front door listens on")
	fs.IntVar(&c.Port, "port", c.Port, "HTTP port of the front door (0: a free port)")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory where kvrouter keeps its state")
	fs.Var(&modelsValue{c}, "model", "served model name, or a list NAME[=DIR],... whose first entry is the default model and DIR a folder with that model's tokenizer.json and tokenizer_config.json")
	fs.StringVar(&c.TokenizerDir, "tokenizer", c.TokenizerDir, "folder with the model's tokenizer.json and tokenizer_config.json (empty: embedded Qwen3)")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "KV block size in tokens that every worker must share")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	bindPD(fs, &c.Frontend.PD)

	c.Queue.bind(fs)
	r := &c.Router
	fs.StringVar(&r.Mode, "router-mode", r.Mode, "selection policy: kv, kv-time (predicted seconds from per-worker time models), round-robin, random or least-loaded")
	r.KVTime.bind(fs)
	fs.Float64Var(&r.Temperature, "router-temperature", r.Temperature, "softmax temperature over normalised costs (0: cheapest worker)")
	fs.Float64Var(&r.OverlapScoreCredit, "kv-overlap-score-credit", r.OverlapScoreCredit, "cost credit in blocks per cached device block")
	fs.Float64Var(&r.PrefillLoadScale, "router-prefill-load-scale", r.PrefillLoadScale, "weight of prefill blocks against decode blocks")
	fs.BoolVar(&r.PrefillClamp, "router-prefill-clamp", r.PrefillClamp, "floor the adjusted prefill blocks at 0 (docs/design.md, the cost formula); false lets a longer cached prefix keep lowering the cost at high credit")
	fs.BoolVar(&r.TrackActiveBlocks, "router-track-active-blocks", r.TrackActiveBlocks, "count running requests' KV blocks in the cost (the decode term)")
	fs.Float64Var(&r.HostCacheHitWeight, "router-host-cache-hit-weight", r.HostCacheHitWeight, "credit per host-memory block beyond the device prefix")
	fs.Float64Var(&r.DiskCacheHitWeight, "router-disk-cache-hit-weight", r.DiskCacheHitWeight, "credit per disk block beyond the device prefix")
	fs.IntVar(&r.EventThreads, "router-event-threads", r.EventThreads, "index writer goroutines")
	fs.BoolVar(&r.NoKVEvents, "no-router-kv-events", r.NoKVEvents, "ignore KV events: route every worker in approximate mode")
	fs.Float64Var(&r.TTLSecs, "router-ttl-secs", r.TTLSecs, "seconds an approximate-mode block stays indexed")
	fs.IntVar(&r.MaxTreeSize, "router-max-tree-size", r.MaxTreeSize, "cap on approximate-mode (worker, block) entries")
	fs.Float64Var(&r.PruneTargetRatio, "router-prune-target-ratio", r.PruneTargetRatio, "fraction of the cap kept after a prune")
	fs.BoolVar(&r.PredictOnRoute, "router-predict-on-route", r.PredictOnRoute, "index a short-lived guess for the chosen worker until its stored event arrives")
	fs.Float64Var(&r.ActiveDecodeBlocksThreshold, "active-decode-blocks-threshold", r.ActiveDecodeBlocksThreshold, "busy above this fraction of KV capacity held by running requests (0: off)")
	fs.IntVar(&r.ActivePrefillTokensThreshold, "active-prefill-tokens-threshold", r.ActivePrefillTokensThreshold, "busy above this many pending prefill tokens (0: off)")
	fs.Uint64Var(&r.Seed, "router-seed", r.Seed, "seed of tie-breaks and sampling")
	fs.Uint64Var(&r.ID, "router-id", r.ID, "id stamped on this router's lifecycle events")
	fs.DurationVar(&r.SweepInterval, "router-sweep-interval", r.SweepInterval, "how often expired bookings and approximate entries are swept")
	fs.DurationVar(&r.RequestExpiry, "router-request-expiry", r.RequestExpiry, "free a booking whose Free was lost this long after it was made (0: never)")
	fs.DurationVar(&r.RequestSweepInterval, "router-request-sweep-interval", r.RequestSweepInterval, "how often, at most, bookings are checked against --router-request-expiry")
	r.Knobs.bind(fs)

	e := &c.Events
	fs.DurationVar(&e.SilentAfter, "kv-events-silent-after", e.SilentAfter, "mark a worker DEGRADED after this long without events while it serves requests")
	fs.DurationVar(&e.ReplayTimeout, "kv-events-replay-timeout", e.ReplayTimeout, "bound on one replay request")
	fs.DurationVar(&e.DialRetry, "kv-events-dial-retry", e.DialRetry, "wait between attempts to connect to an event endpoint")
	fs.DurationVar(&e.ReadyTimeout, "ready-timeout", e.ReadyTimeout, "give up waiting for initial replays after this and report ready")
	fs.DurationVar(&e.HealthInterval, "worker-health-interval", e.HealthInterval, "how often each worker's /health is probed (0: never)")
	fs.DurationVar(&e.HealthTimeout, "worker-health-timeout", e.HealthTimeout, "bound on one health probe")
	fs.DurationVar(&e.LoRARefresh, "lora-refresh-interval", e.LoRARefresh, "how often each worker's /v1/models is read for its loaded LoRA adapters (also on join and on a 404; 0: never)")
	fs.IntVar(&e.HealthFailures, "worker-health-failures", e.HealthFailures, "failed probes in a row that mark a worker DOWN")

	f := &c.Frontend
	fs.Int64Var(&f.MaxBodyBytes, "max-body-bytes", f.MaxBodyBytes, "largest request body in bytes")
	fs.IntVar(&f.MaxPromptTokens, "max-prompt-tokens", f.MaxPromptTokens, "longest prompt in tokens (0: no limit)")
	fs.BoolVar(&f.ForwardTokenIDs, "forward-token-ids", f.ForwardTokenIDs, "send completions to workers as the router's token ids")
	fs.IntVar(&f.MaxRetries, "max-retries", f.MaxRetries, "other workers tried when the chosen one fails before its first byte")
	fs.Var((*listValue)(&f.APIKeys), "api-keys", "comma-separated bearer tokens for the OpenAI endpoints (empty: open)")
	fs.Var((*listValue)(&f.AdminKeys), "admin-keys", "comma-separated bearer tokens for the admin endpoints (empty: open)")
	fs.DurationVar(&f.ShutdownTimeout, "shutdown-timeout", f.ShutdownTimeout, "how long in-flight requests may take to finish on shutdown")
	fs.DurationVar(&f.DialTimeout, "worker-dial-timeout", f.DialTimeout, "bound on connecting to a worker")
	fs.DurationVar(&f.ReadHeaderTimeout, "read-header-timeout", f.ReadHeaderTimeout, "bound on reading a client's request headers")
	fs.DurationVar(&f.BodyReadTimeout, "body-read-timeout", f.BodyReadTimeout, "bound on reading a client's request body (0: none)")
	fs.IntVar(&f.MaxOutputTokens, "max-output-tokens", f.MaxOutputTokens, "largest max_tokens a request may ask for (above it, or below 1: 400)")
	fs.IntVar(&f.TokenizeConcurrency, "tokenize-concurrency", f.TokenizeConcurrency, "large prompts (64 KiB or more) tokenized at once (0: GOMAXPROCS)")
	fs.DurationVar(&f.TokenizeQueueTimeout, "tokenize-queue-timeout", f.TokenizeQueueTimeout, "bound on a large prompt's wait to be tokenized; then 503")
	fs.DurationVar(&f.WriteTimeout, "write-timeout", f.WriteTimeout, "bound on each write to a client (one SSE event); a slower client is dropped (0: none)")
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", f.IdleTimeout, "close keep-alive client connections idle this long")
	fs.IntVar(&f.MaxHeaderBytes, "max-header-bytes", f.MaxHeaderBytes, "largest request headers in bytes")
	fs.StringVar(&f.TLSCertFile, "tls-cert-file", f.TLSCertFile, "PEM certificate (chain) to serve HTTPS with (with --tls-key-file)")
	fs.StringVar(&f.TLSKeyFile, "tls-key-file", f.TLSKeyFile, "PEM private key of --tls-cert-file")
	fs.DurationVar(&f.ResponseHeaderTimeout, "worker-response-timeout", f.ResponseHeaderTimeout, "bound on waiting for a worker's response headers (0: as long as the client)")
	fs.DurationVar(&f.StreamIdleTimeout, "worker-stream-idle-timeout", f.StreamIdleTimeout, "bound on each silence of a worker mid-response, and on a stream's headers: then 504 or an SSE error event (0: none)")

	p := &c.EventPlane
	fs.StringVar(&p.Kind, "event-plane", p.Kind, "nats (RouterEvents, registry and replica sync over NATS), zmq (RouterEvents from the static workers' ZMQ endpoints, no NATS) or none (engines' own ZMQ streams only)")
	p.NATS.BindFlags(fs)
	fs.StringVar(&p.Namespace, "namespace", p.Namespace, "event-plane namespace in every NATS subject")
	fs.StringVar(&p.Component, "component", p.Component, "event-plane component in every NATS subject")
	p.Registry.BindFlags(fs)
	fs.DurationVar(&p.Registry.Resync, "registry-resync", p.Registry.Resync, "how often the worker registry is re-read whole to repair changes a watch missed (also after every reconnect); at least 1s")
	fs.BoolVar(&p.Durable, "durable-kv-events", p.Durable, "read KV events through a JetStream durable consumer with index snapshots")
	fs.Uint64Var(&p.SnapshotThreshold, "router-snapshot-threshold", p.SnapshotThreshold, "durable mode: snapshot the index and purge when the stream holds more messages than this")
	fs.BoolVar(&p.ResetStates, "router-reset-states", p.ResetStates, "durable mode: purge the stream and snapshot at start (unsafe while other routers run)")
	fs.BoolVar(&p.ReplicaSync, "router-replica-sync", p.ReplicaSync, "share active-request bookings with the other router replicas over NATS")
	fs.DurationVar(&p.ReplicaResyncInterval, "router-replica-resync-interval", p.ReplicaResyncInterval, "replica sync: how often every peer's snapshot is fetched and reconciled (0: only on reconnects and holes)")

}

// listValue is a comma-separated list flag; each Set replaces the list, so
// a later layer overrides an earlier one.
type listValue []string

var (
	_ flag.Value = (*listValue)(nil)
	_ flag.Value = (*fleet.WorkerFlags)(nil)
)

func (l *listValue) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

func (l *listValue) Set(s string) error {
	*l = nil
	if s == "" {
		return nil
	}
	for p := range strings.SplitSeq(s, ",") {
		*l = append(*l, strings.TrimSpace(p))
	}
	return nil
}

// EnvName is the environment variable of a flag: KVROUTER_ and the name in
// upper snake case ("router-temperature" → "KVROUTER_ROUTER_TEMPERATURE").
func EnvName(flagName string) string {
	return "KVROUTER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// quoteList renders values for an error message.
func quoteList(v []string) string {
	q := make([]string, len(v))
	for i, s := range v {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
