// Package batchseq is the pure state machine of one vLLM engine rank's
// KV event stream as the router sees it: batches numbered by a sequence
// that a restarted engine starts again, a replay buffer that can resend
// recent batches, and no way to ask for the whole cache. It decides, for
// each live batch, whether to apply it, drop it as a duplicate, recover a
// gap by replay, or clear the rank because events were lost, and which
// state (Syncing, Exact, Degraded) the rank is in.
//
// It exists apart from package vllmzmq, which owns the sockets and the
// goroutines, so that these rules can be tested without sockets and stay
// pure: no I/O, no goroutines, no clock (a test in package purity checks
// it). A driver feeds it live batches and disconnects; when a Step asks
// for a replay, the driver runs it, hands each replayed batch to
// ReplayBatch and the outcome to ReplayDone, and repeats while the
// returned Step asks for more. Decoding and applying a batch are the
// driver's, through Output.
//
// Why not the recovery package's Stream: that machine speaks the Dynamo
// protocol, where a worker answers ranges and full dumps by event id. A
// vLLM publisher can only replay what its buffer still holds, so a loss
// is answered by clearing the rank, and a restart is told from a
// duplicate by the payload's hash, not by a publisher id.
package batchseq
