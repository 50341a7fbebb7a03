// Package mocker is the core of kvrouter's mock engine: a simulated vLLM
// engine rank that needs no GPU, so that routers, tests, demos and the
// offline simulator have workers that behave like real ones. They cache
// prefixes, run out of KV blocks, evict, preempt, slow down as they fill up,
// and report KV events.
//
// The core is a pure state machine: no goroutines, no I/O, no clock. Add
// queues a request, Step runs one scheduler iteration and returns how long it
// takes in model time, the tokens it produced and the KV events it caused.
// Callers own time: the HTTP worker sleeps for the step's duration; the
// simulator advances a virtual clock. Same inputs give the same outputs and
// events.
//
// Model, one Engine per data-parallel rank:
//
//   - A paged device KV pool of Config.NumGPUBlocks blocks of BlockSize
//     tokens. Blocks are identified by the router's sequence hash of their
//     content (internal/kvhash), but the hash the engine publishes is its own
//     opaque id (EngineHash: a bijective mix with Config.HashSeed), so
//     routers are exercised on engine hashes they cannot recompute.
//   - Prefix caching: a request takes the longest run of cached leading
//     blocks (reference counted); at least one token is always computed. A
//     Stored event is emitted only when a block is newly filled; a block
//     whose content another request cached meanwhile is swapped for the
//     cached one silently, so each content is cached once and every stored
//     block's parent is cached.
//   - Free blocks: empty blocks are used first; then the least recently
//     freed cached block is evicted (Removed). A finishing request frees
//     its blocks last first, so the ends of chains go before shared
//     prefixes.
//   - Optional host tier (NumCPUBlocks): a device eviction copies the block
//     to an LRU host pool (Stored, medium CPU); a prefix hit there is copied
//     back (Stored on the device) at a transfer cost instead of recomputed;
//     the host LRU evicts for good (Removed, CPU).
//   - Scheduling like vLLM v1: running requests first (decodes and prefill
//     chunks) within MaxNumBatchedTokens, then waiting requests in order
//     while MaxNumSeqs, the token budget and the admission watermark allow.
//     With LongPrefillTokenThreshold set, no request computes more than
//     that many tokens in one step (vLLM's long_prefill_token_threshold).
//     When a running request cannot grow, the newest running request is
//     preempted: its blocks are freed and it is requeued at the front to be
//     recomputed (mostly from the cache).
//   - Timing: Dynamo's polynomials (PrefillMs, DecodeMs) divided by the
//     speedup ratios. A mixed step is one forward pass over prefill and
//     decode tokens, so it costs PrefillMs(all tokens), and at least the
//     decode step it also is. Host-tier onboarding adds its transfer time.
//
// Disaggregated serving (pd.go): a prefill rank keeps a finished request's
// blocks (Request.Hold) until Release; a decode rank takes a request whose
// prompt KV was received (Request.Remote), computes only its last prompt
// token and caches the received blocks as computed ones (reported stored),
// as vLLM does; TransferTime models the transfer.
//
// Data parallelism is one Engine per rank; the worker process and the
// simulator hold several.
package mocker
