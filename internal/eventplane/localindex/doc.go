// Package localindex is a worker's own record of what it has cached: the
// worker-side local indexer. It applies the worker's events first, numbers
// them with ids counting up by one from 0 (as Dynamo's local indexer does;
// LastEventID says whether any event was numbered yet), keeps the last Capacity of them in
// a ring buffer, and answers the recovery queries a router sends after a gap:
// a range of events, or a full dump of the cached blocks when the range has
// left the buffer (or on first contact).
//
// It is the state the event plane serves over NATS request/reply, so it
// lives in the event plane: the agent sidecar and the mock worker own one
// per (worker, dp rank), and the recovery package answers queries from it. It is safe for
// concurrent use: the engine loop writes, responders read.
package localindex
