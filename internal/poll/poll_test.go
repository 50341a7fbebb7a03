package poll_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// fakeTB records failures instead of ending the test, so that a poll that
// fails can be watched failing.
type fakeTB struct {
	testing.TB
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

// A condition that becomes true after a few checks ends the wait without a
// failure, and is not checked again after it held.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	f := &fakeTB{}
	var checks atomic.Int32
	poll.Until(f, 5*time.Second, func() bool { return checks.Add(1) == 3 }, "the third check")
	if len(f.fatals) != 0 {
		t.Fatalf("failed: %q", f.fatals)
	}
	if got := checks.Load(); got != 3 {
		t.Fatalf("checked %d times, want 3", got)
	}
}

// A condition set by another goroutine is seen.
func TestUntilSeesAnotherGoroutine(t *testing.T) {
	f := &fakeTB{}
	var set atomic.Bool
	go func() {
		time.Sleep(30 * time.Millisecond)
		set.Store(true)
	}()
	poll.Until(f, 5*time.Second, set.Load, "the flag")
	if len(f.fatals) != 0 || !set.Load() {
		t.Fatalf("fatals %q, set %v", f.fatals, set.Load())
	}
}

// A condition that never holds fails the test once, after the timeout,
// saying what it waited for.
func TestUntilFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeTB{}
	const timeout = 50 * time.Millisecond
	start := time.Now()
	poll.Until(f, timeout, func() bool { return false }, "the moon")
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("gave up after %v, before the %v timeout", waited, timeout)
	}
	if len(f.fatals) != 1 {
		t.Fatalf("failed %d times, want once: %q", len(f.fatals), f.fatals)
	}
	if want := "timed out after 50ms waiting for the moon"; f.fatals[0] != want {
		t.Fatalf("message %q, want %q", f.fatals[0], want)
	}
}

// UntilState returns quietly once done, and on a timeout names the last
// state the condition described.
func TestUntilStateReportsTheLastState(t *testing.T) {
	f := &fakeTB{}
	n := 0
	poll.UntilState(f, 5*time.Second, func() (bool, string) { n++; return n == 2, fmt.Sprint(n) }, "two")
	if len(f.fatals) != 0 || n != 2 {
		t.Fatalf("fatals %q after %d checks", f.fatals, n)
	}
	n = 0
	poll.UntilState(f, 30*time.Millisecond, func() (bool, string) { n++; return false, fmt.Sprintf("check %d", n) }, "never")
	if len(f.fatals) != 1 {
		t.Fatalf("failed %d times, want once: %q", len(f.fatals), f.fatals)
	}
	if want := fmt.Sprintf("timed out after 30ms waiting for never; last: check %d", n); f.fatals[0] != want {
		t.Fatalf("message %q, want %q", f.fatals[0], want)
	}
	if !strings.Contains(f.fatals[0], "check ") || n < 2 {
		t.Fatalf("checked %d times before giving up", n)
	}
}
