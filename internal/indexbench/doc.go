// Package indexbench measures the prefix index on a realistic workload: a
// Mooncake trace replayed over a fleet of simulated workers, each an LRU
// cache of KV blocks that emits stored and removed events as it admits and
// evicts, the way vLLM's prefix cache does. It backs `kvrouter bench index`.
//
// Building the stream (Build) is separate from measuring (Run) so the
// event generation cost never counts as index time.
//
// It lives outside internal/index because it reads the clock and the OS
// (CPU time) and starts goroutines, which the pure index must not; it
// drives both index.Index and liveindex.Index.
package indexbench
