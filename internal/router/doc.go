// Package router composes the router core — block hashing (kvhash), the
// prefix index, the active-sequence ledger (sequences) and the scheduler —
// into one decision API: Route hashes a request, asks the index for every
// worker rank's cached prefix, asks the ledger for every worker rank's
// load, scores, picks and books, and explains the pick.
//
// Why a separate package: the parts are pure and single-purpose; something
// has to own the locking, the worker table (block size, dp ranks, KV
// capacity, DOWN), the random source and the lifecycle hooks that replica
// sync needs. That is this package; it still does no I/O, starts no
// goroutines and reads time only through the clock it is given.
//
// Atomicity: hashing and the index query run outside the router's lock
// (they need no router state); scoring and booking run under it, so two
// concurrent Route calls always see each other's bookings. Index writes
// (events, approximate records) are whatever the Index implementation makes
// them: asynchronous with liveindex.Index, synchronous with Serial.
//
// Lifecycle events (AddRequest, MarkPrefillCompleted, Free), each stamped
// with the router id, go to an Observer for replica sync; ApplyRemote
// applies other routers' events and ignores the router's own. Replica
// sync's anti-herding shadow booking runs inside Route (SetShadows), so
// Route is never wrapped: this package's API is the one the front door
// routes, books and hashes through, and the sentinels it documents
// (errors.go) are the ones callers tell refusals apart by.
//
// Prefill booked for a request is its input tokens minus its device overlap
// on the chosen worker times the block size (host and disk hits still cost
// a load, so they do not reduce the booked prefill).
package router
