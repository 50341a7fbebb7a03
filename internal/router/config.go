package router

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// Config configures a Router.
type Config struct {
	// RouterID stamps this router's lifecycle events; ApplyRemote ignores
	// events carrying it. Default 0 (set a unique one per replica).
	RouterID uint64
	// BlockSize is the KV block size in tokens every worker must share;
	// AddWorker refuses others. Default 16.
	BlockSize int
	// Policy names the selection policy: kv, kv-time, round-robin, random
	// or least-loaded. Default "kv".
	Policy string
	// PredictOnRoute records a short-lived prediction that the chosen
	// (event-fed) worker holds the request's blocks until its stored event
	// arrives. Default false.
	PredictOnRoute bool
	// Seed seeds the random source for tie-breaks and sampling. Default 0.
	Seed uint64
	// Scheduler holds the cost knobs and busy thresholds.
	Scheduler scheduler.Config
	// Sequences configures load tracking; its BlockSize is overwritten by
	// BlockSize.
	Sequences sequences.Config
	// KVTime configures the kv-time policy.
	KVTime scheduler.KVTimeConfig
	// TimeModel configures every worker rank's time model (fed by Observe
	// whatever the policy; read by kv-time).
	TimeModel timemodel.Config
	// IndexReserveMaxBlocks caps the engine-table reservation AddWorker
	// asks the index for on each of a worker's ranks: the rank's KV
	// capacity in blocks, at most this many. The table still grows by
	// doubling with the blocks the rank stores; the reservation keeps it
	// from shrinking below the capacity's size (about 24 bytes per
	// reserved block) once it has grown there, so a churning cache does
	// not resize back and forth. 0 turns reservations off. Default 2^20
	// (about 24 MB per rank at most), so a registration that claims a
	// huge capacity cannot pin more than that.
	IndexReserveMaxBlocks int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		BlockSize: 16,
		Policy:    scheduler.PolicyKV,
		Scheduler: scheduler.DefaultConfig(),
		Sequences: sequences.DefaultConfig(),
		KVTime:    scheduler.DefaultKVTimeConfig(),
		TimeModel: timemodel.DefaultConfig(),

		IndexReserveMaxBlocks: 1 << 20,
	}
}

// ErrConfig wraps configuration errors found by Validate.
var ErrConfig = errors.New("invalid router config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.BlockSize <= 0 {
		return fmt.Errorf("%w: block size %d must be positive", ErrConfig, c.BlockSize)
	}
	if c.IndexReserveMaxBlocks < 0 || c.IndexReserveMaxBlocks > index.MaxReserveBlocks {
		return fmt.Errorf("%w: index reserve cap %d outside [0, %d]", ErrConfig, c.IndexReserveMaxBlocks, index.MaxReserveBlocks)
	}
	if _, err := scheduler.NewPolicy(c.Policy); err != nil {
		return err
	}
	if err := c.Scheduler.Validate(); err != nil {
		return err
	}
	if err := c.KVTime.Validate(); err != nil {
		return err
	}
	if err := c.TimeModel.Validate(); err != nil {
		return err
	}
	s := c.Sequences
	s.BlockSize = c.BlockSize
	return s.Validate()
}
