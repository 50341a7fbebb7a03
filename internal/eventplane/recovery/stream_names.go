package recovery

import (
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery/stream"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// The protocol's messages and the router-side state machine live in the
// pure package stream; these names re-export them so that transports
// import only recovery.

// Kind is what a Reply says (stream.Kind).
type Kind = stream.Kind

// Reply kinds (see stream.KindEvents and the others).
const (
	KindEvents       = stream.KindEvents
	KindTreeDump     = stream.KindTreeDump
	KindTooNew       = stream.KindTooNew
	KindInvalidRange = stream.KindInvalidRange
	KindError        = stream.KindError
)

// Request asks one worker rank for events (stream.Request).
type Request = stream.Request

// Reply is a worker's answer to a Request (stream.Reply).
type Reply = stream.Reply

// Stream is the router-side state of one worker rank's event stream
// (stream.Stream).
type Stream = stream.Stream

// Step is what a Stream asks its driver to do (stream.Step).
type Step = stream.Step

// DefaultMaxHeld is stream.DefaultMaxHeld.
const DefaultMaxHeld = stream.DefaultMaxHeld

// DumpRequest asks w for a full dump (stream.DumpRequest).
func DumpRequest(w kvevent.WorkerRank) Request { return stream.DumpRequest(w) }

// RangeRequest asks w for events from..to (stream.RangeRequest).
func RangeRequest(w kvevent.WorkerRank, from, to uint64) Request {
	return stream.RangeRequest(w, from, to)
}

// NewStream returns the stream of worker rank w (stream.New).
func NewStream(w kvevent.WorkerRank, maxHeld int) *Stream { return stream.New(w, maxHeld) }
