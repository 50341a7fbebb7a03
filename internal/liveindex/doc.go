// Package liveindex is the prefix index as the router runs it: one
// index.Index behind a read-write lock, fed by writer goroutines, queried
// on the caller's goroutine.
//
// It exists so that package index stays pure (no goroutines, no clock, no
// I/O: a data structure driven by arguments) while the serving process
// still applies events from many transports concurrently with queries.
// The name says what it adds to the tree: the index while live, taking
// writes and reads at once. Everything about what an answer is lives in
// package index; this package only decides who runs which operation when.
//
// # Concurrency
//
// A worker (all its dp ranks) is pinned to one writer, so its events apply
// in order, and Cleared/RemoveWorker reach the writer holding all its
// ranks. A writer takes the write lock for a batch of whole operations
// (about 64 blocks), so a query, which runs on the caller's goroutine
// under the read lock, never sees half an event. Applying a block is
// mostly waiting for cache misses in its worker's engine-hash table, so a
// writer first loads the batch's slots under the read lock
// (index.Index.Prefetch, next to queries, and only when that lock is free
// at once), and holds the write lock only for the rest.
//
// Our first version sharded the tree by worker (one tree and lock per
// writer); we dropped it: a query must then walk every shard, so its cost
// multiplies by the shard count (it measured several times slower on the
// 100-worker query benchmark), and on a 2-core machine the extra write
// parallelism buys little because apply is memory-bound.
//
// Writes are asynchronous: Flush waits until everything enqueued before it
// is applied, and Close stops the writers after draining their queues.
package liveindex
