package poll

import (
	"testing"
	"time"
)

// Every is how often a condition is checked.
const Every = 10 * time.Millisecond

// Until checks cond every 10 ms until it holds. If it still does not hold
// after timeout, it fails t with "timed out after <timeout> waiting for
// <what>" (and returns, should t's Fatalf return).
func Until(t testing.TB, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	UntilState(t, timeout, func() (bool, string) { return cond(), "" }, what)
}

// UntilState is Until for a condition that also describes what it saw
// (done reports whether it holds); the last description is in the failure
// message, after "; last: ".
func UntilState(t testing.TB, timeout time.Duration, cond func() (done bool, state string), what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state == "" {
				t.Fatalf("timed out after %v waiting for %s", timeout, what)
			} else {
				t.Fatalf("timed out after %v waiting for %s; last: %s", timeout, what, state)
			}
			return
		}
		time.Sleep(Every)
	}
}
