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
// Consistency: a snapshot holds the index dump, the stream sequence it
// covers, and each worker rank's last event id. A starting router deletes
// its old consumer, restores the snapshot and consumes from the sequence
// after it, so nothing is applied twice (the stream's order is the order of
// application). A snapshot never replaces a newer one, and purges never go
// past the slowest consumer's ack floor, so a lagging router loses nothing.
package durable
