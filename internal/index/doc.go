// Package index is the router's global prefix index: which worker rank
// holds which prompt prefix, on which storage tier, and how many leading
// blocks of a request each worker already has.
//
// # Model
//
// The tree is keyed by local block hashes (kvhash, recomputed by the router
// from token ids), so engines never need to share a hash seed. Engine block
// hashes are opaque ids kept per (worker, dp rank, tier) in a table from
// engine hash to node with a reference count: the same block stored twice
// needs two removals (Stats.DuplicateStores counts the repeats; Dynamo's
// index ignores a repeated store instead, see docs/design.md). A stored event finds its parent through that table
// (its own tier first, then the worker's other tiers, so a host-tier store
// may hang below a device block); an unknown parent refuses that event
// only. A removal of an unknown hash is counted and the rest of the batch
// applies. Cleared drops one (worker, dp rank), all tiers; RemoveWorker drops every
// rank of a worker. A node no worker holds is freed at once.
//
// # Removal in the middle of a chain
//
// A block is reusable only with its whole prefix, so a worker's score stops
// at its first missing block. We chose to drop, for that worker, every
// block it held below a removed block (prefix semantics enforced at write
// time), rather than keep them indexed as vLLM keeps them in its cache.
// That keeps the invariant "a worker holding a node holds its parent",
// which is what makes a query cost O(depth) plus O(holder changes) instead
// of O(depth × workers): along a path the holder set only shrinks, so an
// unchanged holder count means an unchanged set. The cost: re-storing the
// missing block does not revive the blocks below it (the engine re-stores
// them when a request recomputes them), and their later removals count as
// unknown removals. Engines evict chains from their tail (vLLM frees a
// request's blocks in reverse order), so this is rare.
//
// # Memory layout
//
// Nodes are 32-byte structs in fixed pages, named by uint32 ids: local
// hash, parent, first child, sibling links, and the holders — inline when
// one worker holds the node, else a sorted list of (worker id, tier mask)
// entries. A node's children are reached through its first-child pointer
// (a chain's next block is usually the only child); only children of nodes
// with several children go into one open-addressing table keyed by
// (parent, local hash) whose keys live in the nodes. Engine-hash tables are
// open addressing with 12-byte slots. Applying a block is mostly waiting
// for one cache miss in its worker's table (64 workers of 16 k blocks make
// 25 MB of tables), so the misses are overlapped: on amd64 an event
// prefetches the slots 16 blocks ahead of the one it applies (and a
// removal the nodes 8 ahead) with PREFETCHT0, which does not stall the
// loop; elsewhere it loads the home slots of a run of 32 blocks up front.
// A worker's table grows by doubling with the blocks it stores; Reserve
// (its KV capacity, given when it joins) only keeps the table from
// shrinking below that size, so that a churning cache does not resize
// back and forth, while a fleet of many lightly filled workers pays only
// for the entries they hold. A fresh table's pages are written before
// they are probed, one page fault each instead of two. A node does not
// know its engine hashes (that would cost 8 bytes per entry): the rare
// cascade below a removed block finds them in one pass over the worker's
// table. No per-node maps, no pointers for the garbage collector to scan.
//
// # Modes
//
// Exact workers are fed by KV events (Apply). Approximate workers, which
// publish no events, are fed by the router's own decisions (Record) with a
// TTL and a size cap pruned earliest-expiry first, shallower first on ties.
// A Record stamps its whole root path with one expiry, so the expiry heap
// holds one item per call (named by the path's deepest node), not one per
// block: recording an 8 k-token prompt again only rewrites expiries in the
// holder's table and pushes one item, and allocates nothing.
// Predict-on-route entries (Predict) are short-TTL guesses for an exact
// worker between a routing decision and its stored event; a query takes
// the maximum of a worker's real and predicted scores. All three live in
// one tree. Time is always an argument; the index reads no clock.
//
// # Concurrency
//
// Index is single-threaded and does no I/O, starts no goroutines and reads
// no clock (a test in package purity checks it). The router's concurrent
// wrapper, one Index behind a read-write lock fed by writer goroutines, is
// package liveindex; Prefetch is the one method that exists for it.
package index
