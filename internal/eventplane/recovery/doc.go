// Package recovery keeps a router's view of each worker rank's KV events
// complete and in order, whatever transport carries them.
//
// Live events travel over lossy paths (NATS core, ZMQ PUB/SUB): messages get
// lost while a connection is down, arrive twice, or the publisher restarts
// and counts its event ids from the start again. Every worker keeps a local
// indexer (internal/eventplane/localindex) that can answer three questions: the
// events of an id range, a full dump of its cached blocks, or "you asked for
// something I do not have" (TooNew, InvalidRange). This package holds
//
//   - the wire format of those questions and answers (Request, Reply,
//     msgpack with named fields, a reply split in parts so that a large dump
//     fits any transport's message size limit), shared by the NATS and ZMQ
//     transports and documented in docs/events.md;
//   - Answer, the worker side: what a local indexer replies to a Request;
//   - Stream, the pure router-side state machine of one worker rank:
//     duplicates dropped, gaps turned into range queries, dumps turned into
//     "clear, then replay", publisher restarts detected. It and the
//     messages it speaks (Request, Reply) live in the subpackage stream,
//     which does no I/O, starts no goroutines and reads no clock; this
//     package re-exports their names;
//   - Tracker, which runs one Stream per worker rank on its own goroutine,
//     asks the worker through a transport's Querier and applies the result
//     to the router's index through an Applier.
//
// Why a separate package: the semantics (subscribe first, then dump; a gap
// asks for a range; a dump mid-stream clears the rank first; duplicates are
// dropped) are the same for every transport and are the part that must be
// right. Keeping them pure and transport-free lets them be checked against
// a naive model with random loss, duplication and restarts.
package recovery
