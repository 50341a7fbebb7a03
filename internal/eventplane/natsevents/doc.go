// Package natsevents carries KV events and recovery queries over core NATS.
//
// Workers (the agent sidecar, the mock engine) publish Dynamo RouterEvents
// on namespace.{ns}.component.{comp}.kv-events, one event per message,
// wrapped in Dynamo's event-plane envelope whose publisher id is random per
// process, so a router can tell a restarted publisher from a duplicate.
// Each worker rank answers recovery queries (internal/eventplane/recovery)
// on its own subject namespace.{ns}.component.{comp}.kv-query.{id}.{rank}
// by NATS request/reply; a reply may span several messages.
//
// Routers run a Consumer: one subscription to the events subject (any
// publisher of the format is accepted, bare or in the envelope, not only
// our agents), a recovery.Tracker per process and the directory's
// notifications: on Added, subscribe-first-then-dump; on Removed, drop the
// worker's blocks; after a reconnect, ask every worker rank for what it
// missed.
//
// Core NATS delivers at most once: a message published while a connection
// is down is lost. That is fine here because every loss is repaired from
// the worker's local indexer; durable delivery is internal/eventplane/durable.
package natsevents
