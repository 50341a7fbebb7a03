package mocker

import "fmt"

// SetSpeedupRatio changes the engine's speedup ratio (Config.SpeedupRatio)
// from the next step on: the step in progress keeps the duration it was
// given. It models a worker that slows down or speeds up mid-run (thermal
// throttling, a noisy neighbour, a new GPU generation behind the same
// name). A ratio that is not positive is refused and changes nothing.
func (e *Engine) SetSpeedupRatio(r float64) error {
	if !(r > 0) || r > 1e9 {
		return fmt.Errorf("%w: speedup ratio %v must be in (0, 1e9]", ErrConfig, r)
	}
	e.cfg.SpeedupRatio = r
	return nil
}
