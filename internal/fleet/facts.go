package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// StreamState is how far the router trusts one rank's event stream, as
// the rank's subscriber reports it.
type StreamState uint8

// Stream states.
const (
	// StreamSyncing: not connected yet, or the initial replay is running.
	StreamSyncing StreamState = iota
	// StreamExact: every batch since the last clear was applied in order.
	StreamExact
	// StreamDegraded: a gap is being recovered, or could not be.
	StreamDegraded
)

// RankFacts is what is known of one data-parallel rank's event stream.
type RankFacts struct {
	// Rank is the rank's number.
	Rank kvevent.DPRank
	// Stream is its subscriber's last report, and Reason the words that
	// came with it.
	Stream StreamState
	Reason string
	// BlockSize is set while the rank's events carry another block size
	// than the worker declared ("events carry block size 32 ≠ 16"): the
	// decoder drops them, so the index misses blocks.
	BlockSize string
}

// Facts is what is observed of one accepted worker: by its event
// subscribers or the event plane's recovery, the silence watchdog and
// the health prober. Its state follows from them (Facts.State).
type Facts struct {
	// Down is set while the health prober finds the worker unreachable,
	// DownReason says how.
	Down       bool
	DownReason string
	// Events is set when the worker is fed by KV events; without, it is
	// routed in approximate mode.
	Events bool
	// Plane is set when the event plane (a recovery tracker) reports the
	// worker's stream as a whole instead of per-rank subscribers;
	// PlaneExact is its last report and PlaneReason the reason that came
	// with a DEGRADED one.
	Plane       bool
	PlaneExact  bool
	PlaneReason string
	// Ranks are the per-rank streams of a worker read from its engine's
	// ZMQ stream (none for plane-fed or approximate workers).
	Ranks []RankFacts
	// Silent is set while requests run on the worker and no event has
	// come for SilenceWindow (see Silent).
	Silent        bool
	SilenceWindow time.Duration
}

// State derives the worker's state and reason from the facts.
//
// Precedence when several things are wrong at once: DOWN (not routed at
// all), then APPROX (no events by design), then DEGRADED (a rank syncing
// or recovering, events of the wrong block size, or events silent while
// serving; every such reason is listed, joined by "; "), then EXACT.
// REFUSED is the Directory's own and never derived here.
func (f Facts) State() (State, string) {
	if f.Down {
		return StateDown, f.DownReason
	}
	if !f.Events {
		return StateApprox, "no event source: approximate mode"
	}
	var why []string
	if f.Plane && !f.PlaneExact {
		reason := f.PlaneReason
		if reason == "" {
			reason = "recovering"
		}
		why = append(why, reason)
	}
	dp := len(f.Ranks) > 1
	for _, r := range f.Ranks {
		if r.BlockSize != "" {
			why = append(why, rankReason(dp, r.Rank, r.BlockSize))
		}
		if r.Stream == StreamExact {
			continue
		}
		reason := r.Reason
		if r.Stream == StreamSyncing {
			reason = "awaiting initial event recovery (" + reason + ")"
		}
		why = append(why, rankReason(dp, r.Rank, reason))
	}
	if f.Silent {
		why = append(why, fmt.Sprintf("no events for %s while serving requests", fmtDur(f.SilenceWindow)))
	}
	if len(why) > 0 {
		return StateDegraded, strings.Join(why, "; ")
	}
	return StateExact, ""
}

// rankReason prefixes reason with the rank when the worker has several.
func rankReason(dp bool, rank kvevent.DPRank, reason string) string {
	if !dp {
		return reason
	}
	return fmt.Sprintf("dp rank %d: %s", rank, reason)
}

// Silent reports whether, at now, an event-fed worker serving requests
// since busySince, whose last event came at lastEvent, has been silent for
// at least window. Silence counts from the later of the two: an idle
// worker sends no events and is not suspicious.
func Silent(lastEvent, busySince, now time.Time, window time.Duration) bool {
	since := lastEvent
	if busySince.After(since) {
		since = busySince
	}
	return now.Sub(since) >= window
}

// fmtDur renders whole seconds as "60 s" and shorter spans as Go does.
func fmtDur(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
