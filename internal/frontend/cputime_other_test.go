//go:build !unix

package frontend

import "time"

// processCPU is unavailable here; CPU figures read 0.
func processCPU() time.Duration { return 0 }
