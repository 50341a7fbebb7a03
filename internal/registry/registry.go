package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// RegistryConfig names the worker registry bucket and its heartbeat TTL.
type RegistryConfig struct {
	// Bucket is the NATS KV bucket workers register in. Default
	// "kvrouter-workers".
	Bucket string
	// TTL is how long a registration lives without a heartbeat; owners
	// heartbeat every TTL/3. Default 10 s, at least 1 s.
	TTL time.Duration
	// Resync is how often a watcher re-reads the whole bucket to repair
	// anything its watch missed (it also does after every reconnect).
	// Default 30 s (DefaultResync; 0 means the default), at least 1 s.
	Resync time.Duration
	// Replicas is how many copies of the bucket a NATS cluster keeps
	// (natsbus.Config.Replicas; 0 means 1). Default 1.
	Replicas int
}

// DefaultRegistryConfig returns the defaults documented on RegistryConfig.
func DefaultRegistryConfig() RegistryConfig {
	return RegistryConfig{Bucket: "kvrouter-workers", TTL: 10 * time.Second, Resync: DefaultResync, Replicas: 1}
}

// Validate checks the configuration.
func (c RegistryConfig) Validate() error {
	if c.Bucket == "" {
		return errors.New("registry: empty bucket name")
	}
	if c.TTL < MinTTL {
		return fmt.Errorf("registry: ttl %v below %v", c.TTL, MinTTL)
	}
	if c.Replicas < 0 {
		return fmt.Errorf("registry: replicas %d below 0", c.Replicas)
	}
	if c.Resync != 0 && c.Resync < time.Second {
		return fmt.Errorf("registry: resync period %v below 1s", c.Resync)
	}
	return nil
}

// RegistryHistory is how many puts of each key the registry bucket keeps
// (the newest and the ones before it, each until the TTL).
//
// Why more than one: the directory tells a restart from a takeover (two
// live processes writing one key) by whether the accepted process still
// heartbeats. With one value per key, a put superseded before a watcher's
// consumer delivered it is gone: a watcher that falls behind (a loaded
// host, a consumer re-created after a missed heartbeat) while a second
// process writes the key every TTL/5 can miss the owner's heartbeats for a
// whole TTL and let the second process take the worker (the likely cause
// of a takeover test that failed once under heavy load; not reproduced on
// demand). Keeping the last puts lets the consumer
// deliver every one of them unless it falls this many puts of one key
// behind. The cost is small: a key holds at most TTL / (TTL/3) + 1 = 4
// values of its own heartbeats anyway before they age out, so 4 bounds
// the bucket at four records per worker (a few MB for 1,024 workers).
const RegistryHistory = 4

// Registry is the NATS KV registry of workers.
type Registry struct {
	b      *Bucket[fleet.WorkerRecord]
	resync time.Duration
}

// OpenRegistry creates or opens the registry bucket. log may be nil.
func OpenRegistry(ctx context.Context, js jetstream.JetStream, cfg RegistryConfig, log *slog.Logger) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b, err := openBucket[fleet.WorkerRecord](ctx, js, cfg.Bucket, cfg.TTL, cfg.Replicas, RegistryHistory, log)
	if err != nil {
		return nil, err
	}
	resync := cfg.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	return &Registry{b: b, resync: resync}, nil
}

// RecordKey is the registry key of a worker: its id in decimal.
func RecordKey(id kvevent.WorkerID) string { return strconv.FormatUint(uint64(id), 10) }

// processInstance is drawn once per process (see ProcessInstance).
var processInstance = sync.OnceValue(func() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
})

// ProcessInstance returns this process's instance id, 16 random hex
// digits drawn at first use: what Register stamps on records
// (fleet.WorkerRecord.Instance) so that routers tell a restarted worker
// (a new id) from a second live process writing its key (a takeover) and
// from the same worker back after a NATS outage (the same id).
func ProcessInstance() string { return processInstance() }

// Register validates rec (deriving its id from the name when 0, and its
// instance from ProcessInstance when empty) and keeps
// it registered until the returned lease is closed (deregistration) or
// abandoned (the record then expires after the TTL). The lease's Update
// keeps the id and instance (filled in when zero) and validates.
func (r *Registry) Register(ctx context.Context, rec fleet.WorkerRecord) (*Lease[fleet.WorkerRecord], error) {
	if rec.ID == 0 {
		rec.ID = fleet.DeriveID(rec.Name)
	}
	if rec.Instance == "" {
		rec.Instance = ProcessInstance()
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("registering: %w", err)
	}
	l, err := r.b.Keep(ctx, RecordKey(rec.ID), rec)
	if err != nil {
		return nil, err
	}
	l.prepare = func(v fleet.WorkerRecord) (fleet.WorkerRecord, error) {
		if v.ID == 0 {
			v.ID = rec.ID
		}
		if v.ID != rec.ID {
			return v, fmt.Errorf("updating %s: worker id %d: a lease keeps its worker id (%d); register the new one", rec.Name, uint64(v.ID), uint64(rec.ID))
		}
		if v.Instance == "" {
			v.Instance = rec.Instance
		}
		if err := v.Validate(); err != nil {
			return v, fmt.Errorf("updating: %w", err)
		}
		return v, nil
	}
	return l, nil
}

// Watch watches the registry (see Bucket.Watch), re-reading it every
// RegistryConfig.Resync.
func (r *Registry) Watch(ctx context.Context) (*Watcher[fleet.WorkerRecord], error) {
	return r.b.Watch(ctx, ResyncEvery(r.resync))
}

// Bucket returns the underlying bucket.
func (r *Registry) Bucket() *Bucket[fleet.WorkerRecord] { return r.b }

// BindFlags registers --registry-bucket and --registry-ttl on fs, writing
// into c (whose current values are the defaults shown).
func (c *RegistryConfig) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Bucket, "registry-bucket", c.Bucket, "NATS KV bucket workers register in")
	fs.DurationVar(&c.TTL, "registry-ttl", c.TTL, "how long a worker registration lives without a heartbeat (heartbeats every ttl/3)")
}
