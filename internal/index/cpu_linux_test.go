//go:build linux

package index

import (
	"syscall"
	"time"
)

// threadCPU returns the calling thread's CPU time (RUSAGE_THREAD), so
// benchmarks can report a cost that a busy machine does not inflate.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
