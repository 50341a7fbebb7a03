package fleet

import (
	"fmt"
	"time"
)

// State is how well the router currently knows a worker's KV cache.
type State uint8

// Worker states.
const (
	// StateDown means the worker is not routed to (unreachable, or removed
	// from the fleet).
	StateDown State = iota
	// StateExact means events flow and the index is recovered: overlaps are
	// exact.
	StateExact
	// StateDegraded means the worker is routed to but its index entries are
	// incomplete: a gap is being recovered, initial recovery is pending, or
	// events went silent while requests are being served.
	StateDegraded
	// StateApprox means the worker publishes no events: the router indexes
	// its own routing decisions with a TTL (approximate mode).
	StateApprox
	// StateRefused means the worker violates the router's contract (block
	// size or hash contract) and is never routed to.
	StateRefused
)

var stateNames = [...]string{"DOWN", "EXACT", "DEGRADED", "APPROX", "REFUSED"}

// String returns the state's upper-case name, e.g. "EXACT".
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// ParseState parses a state name as String returns it.
func ParseState(s string) (State, error) {
	for i, n := range stateNames {
		if n == s {
			return State(i), nil
		}
	}
	return StateDown, fmt.Errorf("unknown worker state %q", s)
}

// MarshalText renders the state by name (JSON, YAML).
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a state name.
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Routable reports whether requests may be sent to a worker in this state.
func (s State) Routable() bool {
	return s == StateExact || s == StateDegraded || s == StateApprox
}

// Status is a worker's state, why it is in it, and since when.
type Status struct {
	// State is the current state.
	State State `json:"state"`
	// Reason says why, in words an operator understands ("block size 32 ≠
	// 16", "replay could not cover sequences 812–830"); empty for EXACT.
	Reason string `json:"reason,omitempty"`
	// Since is when the worker entered State.
	Since time.Time `json:"since"`
}

// To returns the status after a transition to state with reason at now.
// Since changes only when the state does, so a changing reason (a gap
// growing) does not hide how long the worker has been degraded.
func (s Status) To(state State, reason string, now time.Time) Status {
	if s.State == state && !s.Since.IsZero() {
		s.Reason = reason
		return s
	}
	return Status{State: state, Reason: reason, Since: now}
}

// String renders "STATE (reason) since RFC3339".
func (s Status) String() string {
	r := ""
	if s.Reason != "" {
		r = " (" + s.Reason + ")"
	}
	return s.State.String() + r + " since " + s.Since.UTC().Format(time.RFC3339)
}
