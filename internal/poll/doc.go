// Package poll is the one way tests wait for something to happen: they poll
// a condition for a positive signal, with a deadline, instead of sleeping a
// guessed time. A test that asserts something did not happen first waits
// here for a later thing that did.
//
// It is test support: only _test.go files import it.
package poll
