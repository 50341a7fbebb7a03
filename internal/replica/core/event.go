package core

import "github.com/kvrouter/kvrouter/internal/router"

// Event is a lifecycle event as replicas exchange it: the router's event
// and its place in the sender's event stream, so that a receiver can tell
// when it missed some. Epoch identifies the sender's incarnation and grows
// across restarts (replica.Sync uses the start time in Unix nanoseconds); Seq
// numbers the incarnation's events from 1 without holes. Seq 0 means
// unsequenced (a peer that does not number its events, such as Dynamo's
// router): such events are applied without gap detection.
type Event struct {
	router.LifecycleEvent
	// Epoch is the sender's incarnation (0 with Seq 0).
	Epoch uint64
	// Seq is the event's number in the incarnation's stream (from 1).
	Seq uint64
}

// Snapshot is a router's own bookings at one point of its event stream,
// as lifecycle events that rebuild them (AddRequest for each booking,
// then MarkPrefillCompleted for those past their prefill).
type Snapshot struct {
	// RouterID is the router whose bookings these are.
	RouterID uint64
	// Epoch and Seq are the stream position the bookings reflect: every
	// event of incarnation Epoch up to Seq included, none after.
	Epoch, Seq uint64
	// Events rebuild the bookings, sorted by request id.
	Events []router.LifecycleEvent
}
