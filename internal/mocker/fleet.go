package mocker

import (
	"fmt"
	"slices"
)

// Fleet gives the workers of a fleet their own engine settings, so that a
// fleet can mix GPU generations or batch limits. Each list is empty (every
// worker as the base Config), one value (every worker alike) or one value
// per worker. The zero Fleet is a homogeneous one.
type Fleet struct {
	// Speeds multiply each worker's SpeedupRatio: 2 is a worker twice as
	// fast as the base engine.
	Speeds []float64
	// BatchTokens replace each worker's MaxNumBatchedTokens.
	BatchTokens []int
	// KVBlocks replace each worker's NumGPUBlocks.
	KVBlocks []int
}

// pick returns the i-th value of a list that is empty (def), one value
// (for everyone) or one value per worker.
func pick[T any](list []T, i int, def T) T {
	switch len(list) {
	case 0:
		return def
	case 1:
		return list[0]
	}
	return list[i]
}

// CheckLength reports a per-worker list of n values that is neither empty,
// one value nor one per worker; what names the list in the error.
func CheckLength(what string, n, workers int) error {
	if n > 1 && n != workers {
		return fmt.Errorf("%w: %s has %d values for %d workers: give one per worker, or one for all", ErrConfig, what, n, workers)
	}
	return nil
}

// CheckSpeeds reports a speed list of the wrong length or with a speed
// outside (0, 1e6]; what names the list in the error.
func CheckSpeeds(what string, speeds []float64, workers int) error {
	if err := CheckLength(what, len(speeds), workers); err != nil {
		return err
	}
	for i, s := range speeds {
		if !(s > 0) || s > 1e6 {
			return fmt.Errorf("%w: %s value %d is %v: want a speed in (0, 1e6]", ErrConfig, what, i+1, s)
		}
	}
	return nil
}

// Validate checks the lists against the worker count and every worker's
// resulting engine configuration.
func (f Fleet) Validate(base Config, workers int) error {
	if err := CheckSpeeds("worker speeds", f.Speeds, workers); err != nil {
		return err
	}
	if err := CheckLength("worker batch tokens", len(f.BatchTokens), workers); err != nil {
		return err
	}
	if err := CheckLength("worker KV blocks", len(f.KVBlocks), workers); err != nil {
		return err
	}
	for i := range workers {
		if err := f.Engine(base, i).Validate(); err != nil {
			return fmt.Errorf("worker %d: %w", i, err)
		}
	}
	return nil
}

// Speed is worker i's speed multiplier (1 when Speeds is empty).
func (f Fleet) Speed(i int) float64 { return pick(f.Speeds, i, 1) }

// Engine is worker i's configuration: base with SpeedupRatio multiplied by
// the worker's speed, and its own MaxNumBatchedTokens and NumGPUBlocks.
// i must be below the worker count Validate was given.
func (f Fleet) Engine(base Config, i int) Config {
	e := base
	e.SpeedupRatio *= f.Speed(i)
	e.MaxNumBatchedTokens = pick(f.BatchTokens, i, e.MaxNumBatchedTokens)
	e.NumGPUBlocks = pick(f.KVBlocks, i, e.NumGPUBlocks)
	return e
}

// TotalBlocks is the device KV capacity of workers workers in blocks.
func (f Fleet) TotalBlocks(base Config, workers int) int {
	n := 0
	for i := range workers {
		n += pick(f.KVBlocks, i, base.NumGPUBlocks)
	}
	return n
}

// Heterogeneous reports whether the workers run at different speeds.
func (f Fleet) Heterogeneous() bool {
	return len(f.Speeds) > 1 && slices.Min(f.Speeds) != slices.Max(f.Speeds)
}
