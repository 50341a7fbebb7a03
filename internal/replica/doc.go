// Package replica keeps several router replicas' views of the fleet's load
// consistent, so that replicas behind one load balancer do not each pile
// onto the same "best" worker.
//
// What is shared: the active-sequence bookings (AddRequest,
// MarkPrefillCompleted, Free), not the prefix index — every replica builds
// its own index from the same KV event plane. Each router publishes its
// lifecycle events, stamped with its router id, on
// namespace.{ns}.component.{comp}.active_sequences_events (msgpack with
// named fields, docs/events.md "Replica sync"); every replica applies the
// others' events and ignores its own. Publishing is best effort and never
// blocks routing: the router's observer only enqueues into a bounded queue
// and a full queue drops (and counts) the event.
//
// High availability: each replica announces itself with a heartbeat record
// in a NATS KV bucket (registry.Bucket). Only router ids with a live
// record are followed: events, snapshots and claims of any other id are
// refused and counted, so a publisher that never joined cannot book load
// (a peer whose events beat its record is caught up by a snapshot when
// the record appears). When a record is deleted
// (graceful stop) or expires (crash), the others free every booking that
// replica made, so a dead router leaves no phantom load; bookings whose
// Free was lost also expire in the ledger (sequences). A replica that
// starts late asks each live peer for a snapshot of its own bookings over
// NATS request/reply (chunked replies) and applies them.
//
// Reconciliation: core NATS loses what is published while a connection
// is down, so a lost Free would leave a phantom booking on the peers until
// the ledger's expiry (300 s). Each router therefore numbers its events
// (epoch = its start time, seq from 1 without holes) and a snapshot says
// which position it reflects. A receiver that sees a hole, or the first
// event of an incarnation it did not see start, fetches that peer's
// snapshot at once; so does every router for every live peer after its
// own reconnect, and every ResyncInterval (default 30 s) as a backstop.
// A snapshot request carries the requester's own position, so a peer
// whose latest events were all lost (no later event shows the hole) is
// caught too once its claim has stayed ahead for a second. Applying a
// snapshot replaces everything held for that peer: bookings absent from
// it are freed, missing ones added, prefill marks completed. Events
// received while the snapshot was in flight are recorded: those the
// snapshot covers are ignored (and dropped as stale if they come later),
// those after it are replayed on top, and a hole among them asks for
// another snapshot. Peers that do not number their events (Dynamo's) are
// applied as before, without gap detection. A snapshot lists only the
// bookings the router still holds: the router drops some without a Free
// (RemoveWorker on a worker's removal, the ledger's expiry), and within a
// second the core publishes a Free for each (DropLost), so that a peer
// that missed the worker's removal does not keep them.
//
// Anti-herding ("shadow bookings"): sync happens after selection, so
// replicas deciding in the same instant cannot see each other's picks and
// all choose the same worker. Behind a load balancer each replica sees a
// similar slice of the traffic, so a replica that books a request on a
// worker assumes each live peer is, right now, doing the same: it books
// one short-lived shadow copy of the booking per live peer on that worker
// (stamped with the peer's id). The next decision in the same instant sees
// the worker as loaded as it will be once the peers' real bookings arrive.
// A shadow ends when a real booking from its peer arrives (one real
// booking replaces the oldest shadow of that peer), when its request
// ends, or after ShadowTTL (default 10 ms, well above the replica-to-replica
// latency), whichever is first. With one replica there are no shadows, so
// a single router behaves exactly as without sync. The effect is measured
// by TestHerdingShadows (docs/benchmarks.md "Replica sync").
//
// Core is the pure part (no I/O, no goroutines, time passed in) used by
// the offline simulator and the tests; it lives in the subpackage core,
// re-exported here. Sync is the NATS edge around it.
package replica
