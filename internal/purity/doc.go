// Package purity holds only a test: it checks the rule that the core of
// kvrouter does no I/O, starts no goroutines and reads no clock (time is
// an argument), so that the rule is a checked boundary instead of a
// convention.
//
// For each core package (kvhash, the index tree, sequences, the
// scheduler, the mocker engine, the recovery stream, the replica core,
// the vLLM batch sequencer, the fleet model and the status page's
// timeline) the test fails when
//
//   - the package, or any non-standard package it depends on, imports
//     net, os, os/exec or syscall, or reaches one of them through a
//     standard package other than the few that use them only for the
//     process's own needs (fmt's standard streams, time's zone files);
//     the import graph comes from `go list -deps -json`;
//   - one of the package's own non-test files (for every platform) uses
//     time.Now, time.Since, time.Until, time.After, time.AfterFunc,
//     time.NewTimer, time.NewTicker, time.Tick or time.Sleep, however the
//     time import is named, dot-imports time, or contains a go statement;
//     the files are read with go/parser and the names resolved with
//     go/types.
//
// Everything that needs the network, the OS, goroutines or the clock
// lives at the edges (liveindex, indexbench, the transports, service).
package purity
