// Package fleet is the router's model of its workers: which workers exist,
// what each one promises, and how well the router knows its KV cache. It
// is the vocabulary the router, the event plane, the front door and the
// configuration share, and it is a pure core: no NATS, no network, no
// goroutines, no clock (time is an argument).
//
// A worker's record (WorkerRecord) says what it declared: its HTTP URL, KV
// block size, data-parallel ranks, capacity, where its KV events come from
// and which block-hashing contract they follow. Records come from a
// static list (YAML `workers:` entries or repeatable --worker flags,
// parsed here) or from a registry that reports them as Changes (the NATS
// KV adapter is internal/registry). The Directory merges both (static wins
// on conflict, logged) and turns registry changes into Added / Updated /
// Removed notifications.
//
// The one thing the directory refuses to do quietly is accept a worker
// whose block size or hash contract differs from the router's: such a
// worker would make routing silently wrong (every lookup misses). It is
// refused loudly instead: a warning log, a count in Directory.Stats (the
// service exports it as a metric), and the REFUSED state with the reason,
// visible to /v1/workers.
//
// A worker's state (EXACT, DEGRADED, APPROX, DOWN, REFUSED) with a reason
// and a since-time is the Status value type. Apart from REFUSED, which the
// directory decides, the state follows from what is observed of the
// worker (Facts: its ranks' event streams, health probes, silence while
// serving) by Facts.State, so that the rules are one pure function tested
// on worked examples.
package fleet
