// Package chaos is kvrouter's fault suite: it runs a real in-process fleet
// (mock vLLM workers over loopback HTTP and ZMQ, one to three routers built
// by internal/service) under seeded random fault schedules and checks,
// after every schedule, the invariants an operator relies on:
//
//   - each router's index equals the engines' true cached block sets
//     (compared as multisets of (worker, rank, tier, engine hash, local
//     hash)) within a bounded time after the last fault;
//   - every request a client sent either completed or ended in an error
//     the client saw (counted client-side: none vanished);
//   - every router's bookings return to zero;
//   - on the NATS plane, every router that listed a worker whose
//     registration certainly expired (its heartbeats stopped past the TTL,
//     or NATS stayed down past it) logged the worker's removal, even though
//     the worker registered again (issue 10; counted from the routers'
//     logs, which expose no removal metric);
//   - in a disaggregated fleet (pd_test.go), no prefill worker keeps
//     blocks for a finished request once its hold timeout has passed;
//   - no goroutine outlives the suite (goleak) and nothing panics.
//
// Why a package of its own: the faults cut across every component (engine
// restarts, lost and duplicated event batches, stalled HTTP streams, router
// restarts), so the suite sits above all of them and owns only test code.
// The package has no production code; this file exists to document it.
//
// The checks start from a steady state, not from one passing glance: on
// the NATS plane every router must stay ready, with every worker EXACT and
// every registration fresh, for longer than a watcher takes to report a
// lapsed registration, without a removal or a router start meanwhile
// (after an outage a router may otherwise be about to drop a worker).
//
// Faults are injected at the edges, never inside the code under test: a
// TCP proxy in front of every worker's HTTP port (stall mid-stream, cut
// every connection), an event sink in front of every worker's ZMQ
// publisher (drop live, duplicate, delay), and process-level stops and
// restarts of workers and routers on their original ports.
//
// The short variant (two schedules per plane) runs with `go test
// ./internal/chaos/`; the long suites and the soak test need the build
// tag: `make chaos`, `make soak`. With -short as well (`go test -short
// -tags chaos ./internal/chaos/`) each long suite runs one to three
// schedules and the soak 10 s with 200 clients, under 3 minutes; the soak
// builds the kvrouter binary it drives into a temporary directory unless
// -soak.bin names one. docs/operations.md says what each run covers. A
// failing schedule prints its seed; replay it with
// `go test -tags chaos -run TestChaos ./internal/chaos/ -chaos.seed=N`.
package chaos
