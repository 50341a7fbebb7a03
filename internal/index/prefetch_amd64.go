package index

import "unsafe"

// hasPrefetch reports that prefetchLines issues real prefetch
// instructions, so the apply loops prefetch a fixed distance ahead
// instead of loading runs of slots up front.
const hasPrefetch = true

// prefetchLines asks the processor to start loading the cache line at p
// and the next one, without waiting for them (PREFETCHT0). p need not be
// valid memory: a prefetch never faults.
//
//go:noescape
func prefetchLines(p unsafe.Pointer)

// prefetchLine is prefetchLines for the line at p only.
//
//go:noescape
func prefetchLine(p unsafe.Pointer)
