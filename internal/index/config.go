package index

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes an Index. Build one with DefaultConfig and adjust fields;
// New calls Validate once.
type Config struct {
	// ApproxTTL is how long a block recorded in approximate mode (Record)
	// stays indexed after its last recording. Default 120 s.
	ApproxTTL time.Duration
	// ApproxMaxBlocks caps the number of approximate and predicted
	// (worker, block) entries; above it the index prunes down to
	// ApproxMaxBlocks*PruneRatio, earliest expiry first, shallower blocks
	// first on ties. Default 2^20.
	ApproxMaxBlocks int
	// PruneRatio is the fraction of ApproxMaxBlocks kept after a size
	// prune, in (0, 1]. Default 0.8.
	PruneRatio float64
	// PredictTTL is the lifetime of predict-on-route entries (Predict).
	// Default 5 s.
	PredictTTL time.Duration
	// MaxBytes is an optional memory budget for the index in bytes
	// (estimated from its structures); when exceeded after a write, the
	// least recently matched blocks are evicted down to 90 % of it.
	// 0 (the default) means unbounded.
	MaxBytes int64
	// MaxBlocksPerEvent refuses stored and removed events listing more
	// blocks than this. Default 65536.
	MaxBlocksPerEvent int
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		ApproxTTL:         120 * time.Second,
		ApproxMaxBlocks:   1 << 20,
		PruneRatio:        0.8,
		PredictTTL:        5 * time.Second,
		MaxBlocksPerEvent: 1 << 16,
	}
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("invalid index config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.ApproxTTL <= 0:
		return fmt.Errorf("%w: ApproxTTL must be positive, got %v", ErrConfig, c.ApproxTTL)
	case c.ApproxMaxBlocks <= 0:
		return fmt.Errorf("%w: ApproxMaxBlocks must be positive, got %d", ErrConfig, c.ApproxMaxBlocks)
	case !(c.PruneRatio > 0 && c.PruneRatio <= 1):
		return fmt.Errorf("%w: PruneRatio must be in (0, 1], got %v", ErrConfig, c.PruneRatio)
	case c.PredictTTL <= 0:
		return fmt.Errorf("%w: PredictTTL must be positive, got %v", ErrConfig, c.PredictTTL)
	case c.MaxBytes < 0:
		return fmt.Errorf("%w: MaxBytes must not be negative, got %d", ErrConfig, c.MaxBytes)
	case c.MaxBlocksPerEvent <= 0:
		return fmt.Errorf("%w: MaxBlocksPerEvent must be positive, got %d", ErrConfig, c.MaxBlocksPerEvent)
	}
	return nil
}
