// Package stream is the pure core of KV event recovery: the protocol's
// messages (Request, Reply, Kind) and Stream, the router-side state
// machine of one worker rank's event stream (duplicates dropped, gaps
// turned into range queries, dumps turned into "clear, then replay",
// publisher restarts detected).
//
// It exists apart from package recovery, which holds the wire codec, the
// worker-side Answer and the goroutine-owning Tracker, so that the part
// that must be right stays pure: no I/O, no goroutines, no clock (a test
// in package purity checks it). Package recovery re-exports these names,
// so transports need only one import.
package stream
