// Package logtest holds what the code under test logs: a buffer that the
// servers' goroutines write to while the test reads it.
//
// It is test support: only _test.go files import it.
package logtest
