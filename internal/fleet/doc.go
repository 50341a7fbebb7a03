// Package discovery knows which workers exist and what each one promises:
// its HTTP URL, KV block size, data-parallel ranks, capacity, where its KV
// events come from and which block-hashing contract they follow.
//
// Workers come from two places. A static list (YAML `workers:` entries or
// repeatable --worker flags) covers plain vLLM/SGLang fleets that publish
// ZMQ events and never register anywhere. A NATS KV registry covers workers
// and agents that register themselves and keep their record alive with a
// heartbeat; when the heartbeat stops, the record expires and the worker is
// removed. The Directory merges both (static wins on conflict, logged) and
// turns registry changes into Added / Updated / Removed notifications.
//
// The one thing discovery refuses to do quietly is accept a worker whose
// block size or hash contract differs from the router's: such a worker
// would make routing silently wrong (every lookup misses). It is refused
// loudly instead: a warning log, a counter on the injected Prometheus
// registry, and the REFUSED state with the reason, visible to /v1/workers.
//
// Worker states (EXACT, DEGRADED, APPROX, DOWN, REFUSED) with a reason and
// a since-time are a small value type here so that the router, the event
// plane and the frontend share one vocabulary.
//
// The registry is built on Bucket, a generic NATS KV bucket of TTL'd JSON
// records keyed by id with Lease (heartbeat) and Watcher helpers, so router
// replicas can register themselves in a second bucket the same way.
//
// A Watcher must converge on the bucket whatever NATS does: a router that
// misses a worker's expiry keeps routing to it (issue 10, found by the
// chaos suite: a re-watch request whose reply was lost in a NATS restart
// held the watcher while a worker expired and registered again, and the
// bucket keeps one entry per key, so the expiry was gone for good). So the
// watcher never waits on NATS in its loop (requests are bounded and run
// beside it), reports an expiry from its own clock when no heartbeat
// arrives, re-reads the whole bucket after every reconnect and every
// resync period and reports the difference (view.go, a pure core), and
// reports Expired before a put that comes more than the TTL after the
// previous one (server times): the record expired in between.
package fleet
