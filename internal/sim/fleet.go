package sim

import (
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
)

// SpeedChange sets every worker's speed at a virtual time, modelling a
// fleet whose workers slow down or speed up mid-run.
type SpeedChange struct {
	// At is the virtual time of the change, from the start of the workload
	// (its time 0). Steps already under way keep their duration.
	At time.Duration
	// Speeds are the new per-worker speeds, as mocker.Fleet.Speeds: one
	// value for every worker, or one per worker.
	Speeds []float64
}

// validateFleet checks the per-worker settings and the speed changes.
func (c Config) validateFleet() error {
	if err := c.Fleet.Validate(c.Engine, c.Workers); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for i, ch := range c.SpeedChanges {
		if ch.At < 0 || (i > 0 && ch.At <= c.SpeedChanges[i-1].At) {
			return fmt.Errorf("%w: speed change %d at %v: times must be non-negative and increasing", ErrConfig, i+1, ch.At)
		}
		if len(ch.Speeds) == 0 {
			return fmt.Errorf("%w: speed change %d at %v has no speeds", ErrConfig, i+1, ch.At)
		}
		if err := mocker.CheckSpeeds(fmt.Sprintf("speed change %d", i+1), ch.Speeds, c.Workers); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// EngineConfig is worker i's engine (mocker.Fleet.Engine of Engine).
func (c Config) EngineConfig(i int) mocker.Config { return c.Fleet.Engine(c.Engine, i) }

// TotalBlocks is the fleet's device KV capacity in blocks: the size of the
// shared LRU pool of the hit-ratio bound.
func (c Config) TotalBlocks() int { return c.Fleet.TotalBlocks(c.Engine, c.Workers) }

// applySpeedChange sets every engine's speed to the change's.
func (r *run) applySpeedChange(ch SpeedChange) error {
	for i := range r.workers {
		s := ch.Speeds[0]
		if len(ch.Speeds) > 1 {
			s = ch.Speeds[i]
		}
		if err := r.workers[i].eng.SetSpeedupRatio(r.cfg.Engine.SpeedupRatio * s); err != nil {
			return fmt.Errorf("worker %d: %w", i, err)
		}
	}
	return nil
}
