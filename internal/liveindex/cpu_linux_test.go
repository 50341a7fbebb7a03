//go:build linux

package liveindex

import (
	"syscall"
	"time"
	"unsafe"
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
