// Package workload describes what a fleet is asked to do: a stream of
// requests, each with a virtual arrival time, prompt token ids, an output
// length and, for conversations, a session and turn.
//
// Sources reproduce the workloads that published KV-aware-routing results
// were measured on, with the parameters and defaults of their original tools:
// Mooncake traces replayed at a speedup (optionally spreading each 3 s burst
// bucket uniformly), Dynamo's prefix-ratio benchmark (closed loop), SGLang's
// generated-shared-prefix benchmark (Poisson arrivals), and multi-turn
// conversations whose every turn extends the previous prompt with the
// previous answer and a new user message.
//
// Everything is deterministic given a seed and pure: no I/O, no goroutines,
// no clock. Time is virtual (a time.Duration since the start of the run).
// Prompts are built lazily in Next so a whole hour of trace never sits in
// memory at once; tokens come from trace.BlockToken keyed by a per-stream id,
// so equal prefixes are equal token ids and distinct streams never collide
// in practice.
//
// The package also computes the best hit ratio a router can hope for on a
// request sequence: that of one shared LRU pool holding the fleet's total
// number of blocks (see Bound).
package workload
