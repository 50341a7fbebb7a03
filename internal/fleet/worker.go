package fleet

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// EventKind says where a worker's KV events come from.
type EventKind string

// Event source kinds.
const (
	// EventsNone: the worker publishes no KV events; it is routed in
	// approximate mode.
	EventsNone EventKind = "none"
	// EventsZMQ: the engine's own ZMQ PUB stream (vLLM/SGLang/TRT-LLM
	// format), with an optional replay endpoint.
	EventsZMQ EventKind = "zmq"
	// EventsNATS: Dynamo RouterEvents on the NATS event plane (our agent,
	// the mocker or a Dynamo worker).
	EventsNATS EventKind = "nats"
)

// EventSource says where to read a worker's KV events.
type EventSource struct {
	// Kind is none, zmq or nats.
	Kind EventKind `json:"kind" yaml:"kind"`
	// Endpoint is the ZMQ PUB endpoint of dp rank 0 ("tcp://10.0.0.5:5557");
	// rank r publishes on port + r. zmq only.
	Endpoint string `json:"endpoint,omitempty" yaml:"endpoint,omitempty"`
	// Replay is the ZMQ replay (ROUTER) endpoint of dp rank 0; empty when
	// the engine has none. zmq only.
	Replay string `json:"replay,omitempty" yaml:"replay,omitempty"`
	// Topic is the ZMQ topic filter; empty subscribes to everything.
	Topic string `json:"topic,omitempty" yaml:"topic,omitempty"`
	// Subject is the NATS subject the worker publishes on; empty means the
	// router's default namespace.{ns}.component.{comp}.kv-events. nats only.
	Subject string `json:"subject,omitempty" yaml:"subject,omitempty"`
}

// SchemeXXH3 names Dynamo's block hashing: XXH3-64 with seed 1337 over u32
// LE token ids, chained as XXH3(le64(parent) ‖ le64(local), 1337).
const SchemeXXH3 = "xxh3-1337-v1"

// HashContract is how a publisher computes the local block hashes
// (tokens_hash) it sends. Two parties can share an index only when their
// contracts are equal; engine-native hashes are opaque and not part of it.
type HashContract struct {
	// Scheme names the hash function and seeds, e.g. SchemeXXH3.
	Scheme string `json:"scheme"`
	// LoRASalt is true when a LoRA adapter name is mixed into the seed.
	LoRASalt bool `json:"lora_salt"`
	// NamespaceSalt is true when a cache namespace is mixed into the seed.
	NamespaceSalt bool `json:"namespace_salt"`
}

// DefaultHashContract is kvrouter's own contract (internal/kvhash): the
// Dynamo scheme with LoRA and namespace salting.
func DefaultHashContract() HashContract {
	return HashContract{Scheme: SchemeXXH3, LoRASalt: true, NamespaceSalt: true}
}

// String renders the contract as "scheme[+lora][+ns]".
func (h HashContract) String() string {
	s := h.Scheme
	if h.LoRASalt {
		s += "+lora"
	}
	if h.NamespaceSalt {
		s += "+ns"
	}
	return s
}

// ParseHashContract parses the String form.
func ParseHashContract(s string) (HashContract, error) {
	parts := strings.Split(s, "+")
	h := HashContract{Scheme: parts[0]}
	if h.Scheme == "" {
		return h, fmt.Errorf("hash contract %q: empty scheme", s)
	}
	for _, p := range parts[1:] {
		switch p {
		case "lora":
			h.LoRASalt = true
		case "ns":
			h.NamespaceSalt = true
		default:
			return h, fmt.Errorf("hash contract %q: unknown salt %q (want lora or ns)", s, p)
		}
	}
	return h, nil
}

// WorkerRecord is everything the router needs to know about one worker.
// It is what workers register in the NATS KV registry (as JSON) and what a
// static list entry becomes.
type WorkerRecord struct {
	// ID identifies the worker fleet-wide; events carry it as worker_id.
	// Derived from Name by DeriveID unless given.
	ID kvevent.WorkerID `json:"worker_id"`
	// Name is a unique human-readable name ("w1", a pod name).
	Name string `json:"name"`
	// Model is the served model name; empty when the fleet serves one model.
	Model string `json:"model,omitempty"`
	// URL is the worker's OpenAI-compatible HTTP base URL.
	URL string `json:"url"`
	// BlockSize is the engine's KV block size in tokens.
	BlockSize int `json:"block_size"`
	// DPStart is the first data-parallel rank this worker serves.
	DPStart uint32 `json:"dp_start"`
	// DPSize is the number of data-parallel ranks (at least 1).
	DPSize uint32 `json:"dp_size"`
	// KVCapacityBlocks is the KV cache size in blocks; 0 when unknown.
	KVCapacityBlocks uint64 `json:"kv_capacity_blocks,omitempty"`
	// MaxBatchedTokens is the engine's max batched tokens per step; 0 when
	// unknown.
	MaxBatchedTokens uint64 `json:"max_batched_tokens,omitempty"`
	// Events says where the worker's KV events come from.
	Events EventSource `json:"events"`
	// Hash is the contract its published local hashes follow.
	Hash HashContract `json:"hash"`
	// Role is the worker's part in a disaggregated fleet; empty (older
	// records) means RoleBoth.
	Role Role `json:"role,omitempty"`
	// BootstrapPort is an SGLang prefill worker's KV bootstrap port; 0
	// when it has none.
	BootstrapPort int `json:"bootstrap_port,omitempty"`
	// RegisteredBy names who registered the record ("static", "agent
	// host-3", "mocker"); informational.
	RegisteredBy string `json:"registered_by,omitempty"`
	// Instance identifies the process that registered the record, random
	// per process start (registry.Register sets it): a put from a new
	// instance is a restart, one from a second live instance a takeover,
	// and a record that lapsed in a NATS outage and came back from the
	// same instance is the same worker. Empty in records of older
	// registrants and static workers (no such checks then).
	Instance string `json:"instance,omitempty"`
}

// DeriveID returns the worker id used when none is given: XXH3-64 of the
// name with seed 0, masked to 53 bits so that it survives JSON numbers
// (Dynamo masks its publisher ids the same way); never 0.
func DeriveID(name string) kvevent.WorkerID {
	id := xxh3.HashString(name) & (1<<53 - 1)
	if id == 0 {
		id = 1
	}
	return kvevent.WorkerID(id)
}

// Validate checks the record on its own (not against the router's
// expectations; see Expect).
func (r WorkerRecord) Validate() error {
	var errs []error
	if r.Name == "" {
		errs = append(errs, errors.New("empty name"))
	}
	if err := checkHTTPURL(r.URL); err != nil {
		errs = append(errs, err)
	}
	if r.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("block size %d must be positive", r.BlockSize))
	}
	if r.DPSize == 0 {
		errs = append(errs, errors.New("dp size must be at least 1"))
	}
	if uint64(r.DPStart)+uint64(r.DPSize) > 1<<32 {
		errs = append(errs, errors.New("dp ranks overflow u32"))
	}
	if r.Hash.Scheme == "" {
		errs = append(errs, errors.New("empty hash contract scheme"))
	}
	if _, err := ParseRole(string(r.Role)); err != nil {
		errs = append(errs, err)
	}
	if r.BootstrapPort < 0 || r.BootstrapPort > 65535 {
		errs = append(errs, fmt.Errorf("bootstrap port %d out of range", r.BootstrapPort))
	}
	switch r.Events.Kind {
	case EventsNone, EventsNATS:
	case EventsZMQ:
		if err := checkZMQEndpoint("events", r.Events.Endpoint); err != nil {
			errs = append(errs, err)
		}
		if r.Events.Replay != "" {
			if err := checkZMQEndpoint("replay", r.Events.Replay); err != nil {
				errs = append(errs, err)
			}
		}
	default:
		errs = append(errs, fmt.Errorf("unknown event source kind %q", r.Events.Kind))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("worker %q: %w", r.Name, err)
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("bad url %q: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("bad url %q: want http(s)://host:port", s)
	}
	return nil
}

func checkZMQEndpoint(what, s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "tcp" && u.Scheme != "ipc") || (u.Scheme == "tcp" && u.Port() == "") {
		return fmt.Errorf("bad %s endpoint %q: want tcp://host:port or ipc://path", what, s)
	}
	return nil
}

// ErrBlockSizeMismatch is wrapped when a worker's block size differs from
// the router's.
var ErrBlockSizeMismatch = errors.New("block size mismatch")

// ErrHashContractMismatch is wrapped when a worker's hash contract differs
// from the router's.
var ErrHashContractMismatch = errors.New("hash contract mismatch")

// Expect is what the router requires of every worker.
type Expect struct {
	// BlockSize is the router's KV block size in tokens; 0 accepts any
	// (each worker is then indexed with its own).
	BlockSize int
	// Model, when set, is the router's default model: BlockSize applies
	// to workers of that model (or of none), and a worker of another model
	// is held to its model's pool's block size by the router instead.
	// Empty holds every worker to BlockSize.
	Model string
	// Hash is the router's hash contract; a worker publishing hashes over
	// NATS must match it. ZMQ workers are hashed by the router itself, so
	// their contract is not checked.
	Hash HashContract
	// Takeover is how long after the last put of a key's accepted
	// instance a put from another instance is contested rather than taken
	// for a restart: the first may still be alive (a live owner puts
	// every heartbeat, TTL/3). The service uses TTL/2. 0 takes every new
	// instance for a restart.
	Takeover time.Duration
}

// Check returns nil when rec may join, or an error wrapping
// ErrBlockSizeMismatch or ErrHashContractMismatch whose text is the reason
// shown to operators ("block size 32 ≠ 16").
func (e Expect) Check(rec WorkerRecord) error {
	if e.BlockSize > 0 && rec.BlockSize != e.BlockSize && (e.Model == "" || rec.Model == "" || rec.Model == e.Model) {
		return fmt.Errorf("%w: block size %d ≠ %d", ErrBlockSizeMismatch, rec.BlockSize, e.BlockSize)
	}
	if rec.Events.Kind == EventsNATS && rec.Hash != e.Hash {
		return fmt.Errorf("%w: hash contract %s ≠ %s", ErrHashContractMismatch, rec.Hash, e.Hash)
	}
	return nil
}

// InitialStatus is the state a newly accepted worker starts in: APPROX
// without events, DEGRADED until its event stream has been recovered.
func (r WorkerRecord) InitialStatus() (State, string) {
	if r.Events.Kind == EventsNone {
		return StateApprox, "no event source: approximate mode"
	}
	return StateDegraded, "awaiting initial event recovery"
}
