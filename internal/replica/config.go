package replica

import (
	"errors"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// Config configures replica sync. Start from DefaultConfig; New calls
// Validate.
type Config struct {
	// Namespace and Component build the NATS subjects (see EventsSubject).
	// Defaults "dynamo" and "backend".
	Namespace, Component string
	// Bucket is the NATS KV bucket replicas announce themselves in.
	// Default "kvrouter-routers".
	Bucket string
	// TTL is how long a replica's record lives without a heartbeat (it
	// heartbeats every TTL/3); after that the others free its bookings.
	// Default 10 s, at least 1 s.
	TTL time.Duration
	// Replicas is how many copies of Bucket a NATS cluster keeps
	// (natsbus.Config.Replicas; 0 means 1). Default 1.
	Replicas int
	// QueueSize is the number of outgoing lifecycle events buffered; when
	// full, new events are dropped (and counted) so routing never blocks.
	// Default 100000.
	QueueSize int
	// SnapshotTimeout bounds the wait for one peer's snapshot (at start
	// and on every resync). Default 2 s.
	SnapshotTimeout time.Duration
	// ResyncInterval is how often every live peer's snapshot is fetched
	// again and reconciled with what this router holds for it, a
	// backstop for lifecycle events lost without a trace (snapshots are
	// also fetched on reconnect, on a hole in a peer's event stream and
	// when a peer says it is ahead). 0 turns the periodic fetch off.
	// Default 30 s.
	ResyncInterval time.Duration
	// ChunkEvents is the number of bookings per snapshot reply message.
	// Default 256.
	ChunkEvents int
	// Shadows turns the anti-herding mechanism on: each local booking is
	// mirrored, for ShadowTTL, by one shadow booking per live peer on the
	// same worker (see doc.go). Default true.
	Shadows bool
	// ShadowTTL is how long a shadow booking lives unless a real booking
	// from its peer replaces it first; it should exceed the replica-to-
	// replica event latency. Default 10 ms.
	ShadowTTL time.Duration
	// Clock is the time of bookings, shadows, peers' claims and
	// departures: give it the clock the router was built with
	// (router.New), so that the two agree. nil means time.Now. Timers
	// (heartbeats, shadow ticks, resync retries) run on real time whatever
	// the clock; so does the epoch, which must grow across restarts even
	// under a test's fixed clock.
	Clock func() time.Time
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Namespace:       dynamo.DefaultNamespace,
		Component:       dynamo.DefaultComponent,
		Bucket:          "kvrouter-routers",
		TTL:             10 * time.Second,
		Replicas:        1,
		QueueSize:       100000,
		SnapshotTimeout: 2 * time.Second,
		ResyncInterval:  30 * time.Second,
		ChunkEvents:     256,
		Shadows:         true,
		ShadowTTL:       10 * time.Millisecond,
	}
}

// ErrConfig wraps configuration errors.
var ErrConfig = errors.New("invalid replica sync config")

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Namespace == "" || c.Component == "" {
		errs = append(errs, errors.New("namespace and component are required"))
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("bucket is required"))
	}
	if c.Replicas < 0 {
		errs = append(errs, fmt.Errorf("replicas %d below 0", c.Replicas))
	}
	if c.TTL < registry.MinTTL {
		errs = append(errs, fmt.Errorf("ttl %v below %v", c.TTL, registry.MinTTL))
	}
	if c.QueueSize < 1 {
		errs = append(errs, fmt.Errorf("queue size %d below 1", c.QueueSize))
	}
	if c.SnapshotTimeout <= 0 {
		errs = append(errs, fmt.Errorf("snapshot timeout %v not positive", c.SnapshotTimeout))
	}
	if c.ResyncInterval < 0 {
		errs = append(errs, fmt.Errorf("resync interval %v negative", c.ResyncInterval))
	}
	if c.ChunkEvents < 1 || c.ChunkEvents > MaxChunkEvents {
		errs = append(errs, fmt.Errorf("chunk events %d outside 1..%d", c.ChunkEvents, MaxChunkEvents))
	}
	if c.Shadows && c.ShadowTTL <= 0 {
		errs = append(errs, fmt.Errorf("shadow ttl %v not positive", c.ShadowTTL))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}
