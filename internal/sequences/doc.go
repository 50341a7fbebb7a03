// Package sequences tracks what the router has already sent to each worker
// rank: the running requests, the prompt tokens they still have to prefill
// and the KV blocks they hold. It is the "slot manager" of the router core.
//
// Why it exists: the index only knows what a worker has cached, not what it
// is busy with. Without a record of in-flight work every request with the
// same system prompt would land on the one worker that holds it. The ledger
// gives the scheduler the load term that spreads such requests.
//
// Counting rules:
//
//   - Blocks are identified by the router's sequence hashes. A block shared
//     by several running requests on one worker rank counts once (reference
//     counted by hash). With AssumeKVReuse off a request's blocks are private
//     and never shared.
//   - A request's prefill tokens (input tokens minus the cached prefix) count
//     until MarkPrefillCompleted or Free; its blocks count until Free.
//   - Each rank keeps when its engine started on the prefill still booked
//     (PrefillSince, not part of Load): the booking that found none pending, or the last
//     timed completion (MarkPrefillCompletedAt, FreeAt) that left some. An
//     engine computes its queue in order, so a time model can credit the
//     time since then against the booked prefill; an untimed completion
//     leaves it unknown (zero) until the rank drains.
//   - Each rank sums 1/(expected output − 1) over its running requests
//     expecting at least 2 tokens (Load.ITLExposure): how much a stall of
//     the engine raises their mean inter-token times together.
//   - Because a sequence hash identifies a whole prefix, the blocks active on
//     a worker are prefix-closed for every request: if block i of a prompt is
//     active, so are blocks 0..i-1. The new blocks a candidate request would
//     add on a worker are therefore all blocks from the worker's first missing
//     block on (design §2, prefix semantics). Each worker rank keeps its
//     running requests' hashes in a radix trie (edges are runs of hashes
//     shared by reference, nodes count the requests through them), so
//     booking, freeing and finding the first missing block are walks over
//     a few nodes with sequential comparisons, not a hash-map operation per
//     block (which made booking a 1,024-block prompt cost ~0.4 ms).
//     Potential is on every routing decision's path, so it does work only
//     for the workers that can hold the candidate's first block (an index
//     from each trie's top-edge first hash to its workers), compares a whole
//     edge by its last hash, kept in the edge's node (sequence hashes
//     identify their prefix; a mismatch is binary-searched), and copies the
//     other workers' loads from a dense cache kept in Workers order and
//     recomputed only for the workers whose requests changed;
//     PotentialView hands that cache out without the copy (the router at a
//     thousand workers). Edge labels are copies of the hashes taken from a small
//     recycling pool, so booking does not allocate per block.
//   - With ActiveSequenceStride N only every N-th block hash (positions N-1,
//     2N-1, ...) is tracked and counts for N blocks; the last incomplete group
//     is left out, as in Dynamo.
//   - With TrackOutputBlocks the caller reports generated-token counts; every
//     BlockSize generated tokens add one private decode block, and a request
//     with expected output tokens has its single-reference blocks counted at
//     the fraction 1 − generated/expected, so requests near their end weigh
//     less. Active block counts are therefore float64, not rounded.
//   - Requests older than Expiry (3600 s, Dynamo's) are freed by a lazy
//     sweep at most every ExpirySweep (30 s), driven by the `now` passed to
//     AddRequest or Expire, and counted, so a lost Free cannot leak load
//     forever. Unknown request ids are counted, never fatal.
//
// The package is pure: no I/O, no goroutines, no clock (time is passed in),
// and it is not safe for concurrent use; the router serialises access.
package sequences
