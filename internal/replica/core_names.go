package replica

import (
	"github.com/kvrouter/kvrouter/internal/replica/core"
)

// The pure state machine lives in package core; these names re-export it
// so that users of replica sync need one import.

// Core is replica sync without the network (core.Core).
type Core = core.Core

// CoreConfig configures a Core (core.Config).
type CoreConfig = core.Config

// CoreStats counts what a Core did (core.Stats).
type CoreStats = core.Stats

// Event is a lifecycle event as replicas exchange it (core.Event).
type Event = core.Event

// Snapshot is a router's own bookings at one point of its event stream
// (core.Snapshot).
type Snapshot = core.Snapshot

// Target is what replica sync shares: a *router.Router or every pool of a
// *router.Pools (core.Target).
type Target = core.Target

// NewCore attaches a core to r (core.New).
func NewCore(r Target, cfg CoreConfig, emit func(Event)) *Core { return core.New(r, cfg, emit) }
