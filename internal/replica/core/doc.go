// Package core is replica sync without the network: Core observes the
// local router, numbers its lifecycle events, applies peers' events and
// snapshots, frees the bookings of departed peers and books the
// anti-herding shadows (see package replica for the protocol).
//
// It exists apart from package replica, whose Sync is the NATS edge
// (connections, goroutines, timers, the wall clock), so that the state
// machine stays pure: no I/O, no goroutines, time passed in (a test in
// package purity checks it). The offline simulator and the tests drive it
// directly; package replica re-exports its names.
package core
