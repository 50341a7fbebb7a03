//go:build linux

package liveindex

import (
	"syscall"
	"time"
	"unsafe"
)

// threadClock returns the calling thread's CPU time from
// CLOCK_THREAD_CPUTIME_ID, precise to the nanosecond (getrusage's is tick
// based), for per-call percentiles.
func threadClock() (time.Duration, bool) {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
