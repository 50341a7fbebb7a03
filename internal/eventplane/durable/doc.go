// Package durable is the event plane's durable mode (--durable-kv-events):
// KV events are kept in a JetStream stream, each router reads them through
// its own durable pull consumer, and routers periodically snapshot their
// index into a NATS Object Store bucket so that the stream can be purged
// and a (re)starting router restores snapshot + the stream after it.
//
// Why: with core NATS a router that was down misses events and needs every
// worker's local indexer to answer; in durable mode the broker holds them,
// which also covers publishers without a local indexer (Dynamo's durable
// workers). The stream captures the ordinary events subject, so publishers
// do not change: a core publish on namespace.{ns}.component.{comp}.kv-events
// is stored once the stream exists (EnsureStream).
//
// Completeness: the stream keeps what reached the broker, not what a worker
// failed to publish (its connection was down) or what was lost on the way.
// So the events read from the stream go through the same recovery.Tracker
// as the non-durable plane: per worker rank, duplicates (ids below the next
// expected one; ids count from 0) are dropped, a gap is repaired from the
// worker's local indexer over NATS request/reply (a range, or a dump that
// clears the rank and replays it), and a restarted worker (a new publisher
// id in the envelope, ids starting over, a TooNew answer) is cleared and
// re-synced with a dump. The stream's order is the order events reach the
// tracker; a worker added by discovery gets a dump, after which its older
// stream events are duplicates.
//
// Consistency: a snapshot holds the index dump, the stream sequence it
// covers, and each worker rank's last applied event id and publisher id,
// taken while the tracker is frozen (every event read so far handled, no
// rank applying), so the three agree. A snapshot never replaces a newer
// one, and purges never go past the slowest consumer's ack floor nor the
// snapshot their writer stored, so a lagging router loses nothing. A
// starting router replaces its old consumer with one reading from the
// stream's first message (whose ack floor holds every later purge back),
// only then restores the snapshot, which therefore covers everything
// before that message, resumes each rank at its position (the rank is
// asked for what came after it: events lost at the tail, or a dump if it
// restarted meanwhile) and skips the messages up to the snapshot's
// sequence.
package durable
