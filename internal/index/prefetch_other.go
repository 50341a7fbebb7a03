//go:build !amd64

package index

import "unsafe"

// hasPrefetch is false where there is no assembly prefetch: the apply
// loops load runs of slots up front instead (see engineTable.prefetch).
const hasPrefetch = false

// prefetchLines does nothing here.
func prefetchLines(unsafe.Pointer) {}

// prefetchLine does nothing here.
func prefetchLine(unsafe.Pointer) {}
