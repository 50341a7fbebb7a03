// Package service is kvrouter's composition root: it builds a running
// router process from a config.Config and runs it.
//
// What it wires: the static workers (the fleet directory, which refuses a
// worker whose block size differs from --block-size loudly: log, metric, REFUSED
// state); the router core over the concurrent prefix index; one vLLM-format
// ZMQ subscriber per event-fed worker rank; the HTTP front door (OpenAI API, /v1/route, /v1/query,
// /v1/workers, /health, /ready, /metrics, status page) with the served
// model's tokenizer and chat template.
//
// Why a package and not main: the same wiring serves `kvrouter serve`,
// `kvrouter up` (which adds a mock fleet, see Fleet) and the end-to-end
// tests, which must run the real thing on loopback ports.
//
// Worker state is the service's to gather, because it is the only place
// that sees every signal (the rules that turn them into a state are the
// fleet model's, fleet.Facts.State): the subscriber's stream state per dp rank (SYNCING,
// EXACT, DEGRADED with the reason: a gap being replayed, a gap replay could
// not cover, an engine restart), the silence watchdog (an event-fed worker
// with requests running and no event for --kv-events-silent-after is
// DEGRADED, "no events for 60 s while serving requests"), and the health
// prober (--worker-health-failures failed GET /health in a row: DOWN, not
// routed to; a probe that timed out while the worker's KV events kept
// arriving is not counted). A worker without events is APPROX and routed in approximate
// mode. /ready turns true once every event-fed rank's initial replay is
// done or given up (--ready-timeout).
//
// Shutdown order, on ctx cancel: stop accepting, let in-flight requests
// finish (bounded by --shutdown-timeout; what is still open is closed and
// its booking freed), then stop subscribers, probes and sweeps, then the
// index writers. Nothing outlives Run.
//
// The event plane (--event-plane, plane.go) decides where each worker's
// events come from (sourceOf): with nats (the default) the service starts
// the embedded NATS server (or connects to --nats-url), watches the worker
// registry and merges it with the static workers (registry.Follow into
// the fleet.Directory), feeds every Added/Updated/Removed notification to the NATS
// consumer (natsevents, or durable in --durable-kv-events mode) and to the
// router's worker set, and asks every worker rank for what it missed after
// a reconnect; a removed worker's blocks and bookings are dropped. Static
// workers with a ZMQ endpoint are still read as their engines' own vLLM
// streams. With zmq, the static workers' endpoints are RouterEvent
// publishers (agents) read by zmqevents; with none, there is no event
// plane at all. Event-plane workers get their state from the recovery
// tracker (EXACT once recovered, DEGRADED with the reason) and share the
// silence watchdog and health probes with the others.
//
// One ingestion path (ingest.go): whatever carried them (an engine's vLLM
// stream, core NATS, the durable stream and its snapshot, RouterEvents
// over ZMQ), decoded events are handed to one applier type, which applies
// them to the index through the router core (router.ApplyEvent) and marks
// their worker alive for the silence watchdog. Nothing else writes events
// to the index; the durable consumer only reads it (Flush, Dump) for its
// snapshots.
//
// NATS start-up is resilient (startup.go): the front door serves at once,
// and every NATS step (connecting to an external server, the subscription,
// the durable consumer, replica sync, opening and watching the registry)
// is retried with backoff until it succeeds, logged, counted
// (kvrouter_nats_startup_retries_total) and shown as /ready's reason. A
// NATS server restarting while a router starts therefore delays its
// readiness instead of ending the process; only a misconfiguration
// (credentials refused, TLS) ends Run, with ErrStartup.
//
// Replica sync (--router-replica-sync, NATS only) wraps every model pool
// of the router (replica.Sync): the front door routes through it, and on shutdown it is
// closed after the front door drained, so peers free this router's
// bookings at once.
package service
