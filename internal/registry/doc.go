// Package registry is the NATS KV adapter of the fleet: workers (and
// router replicas) register a record that their heartbeat keeps alive,
// and watchers follow the records as they come, change and expire.
//
// Bucket is a generic NATS KV bucket of TTL'd JSON records keyed by id,
// with Lease (the heartbeat goroutine) and Watcher helpers; Registry is the
// bucket of fleet.WorkerRecords, and Follow feeds a Watcher's changes to a
// fleet.Directory. Router replicas register in a second bucket the same
// way.
//
// A Watcher must converge on the bucket whatever NATS does: a router that
// misses a worker's expiry keeps routing to it (issue 10, found by the
// chaos suite: a re-watch request whose reply was lost in a NATS restart
// held the watcher while a worker expired and registered again, and the
// bucket kept one entry per key, so the expiry was gone for good). So the
// watcher never waits on NATS in its loop (requests are bounded and run
// beside it), reports an expiry from its own clock when no heartbeat
// arrives, re-reads the whole bucket after every reconnect and every
// resync period and reports the difference (view.go, a pure core), and
// reports Expired before a put that comes more than the TTL after the
// previous one (server times): the record expired in between.
package registry
