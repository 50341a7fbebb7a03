package fleet

import (
	"testing"
	"time"
)

// TestFactsState derives a worker's state from its facts, worked example
// by worked example: each expected reason is written out as an operator
// reads it on /v1/workers.
func TestFactsState(t *testing.T) {
	exact := RankFacts{Rank: 0, Stream: StreamExact, Reason: "initial replay applied 3 batches"}
	syncing := RankFacts{Rank: 1, Stream: StreamSyncing, Reason: "connecting"}
	gap := RankFacts{Rank: 0, Stream: StreamDegraded, Reason: "replay could not cover sequences 812–830"}
	wrongBlocks := RankFacts{Rank: 0, Stream: StreamExact, BlockSize: "events carry block size 32 ≠ 16"}
	cases := []struct {
		name   string
		f      Facts
		state  State
		reason string
	}{
		{"no events: approximate", Facts{}, StateApprox, "no event source: approximate mode"},
		{"one exact rank", Facts{Events: true, Ranks: []RankFacts{exact}}, StateExact, ""},
		{"syncing rank", Facts{Events: true, Ranks: []RankFacts{{Stream: StreamSyncing, Reason: "connecting"}}},
			StateDegraded, "awaiting initial event recovery (connecting)"},
		{"gap on the only rank", Facts{Events: true, Ranks: []RankFacts{gap}},
			StateDegraded, "replay could not cover sequences 812–830"},
		{"dp worker: one rank still syncing", Facts{Events: true, Ranks: []RankFacts{exact, syncing}},
			StateDegraded, "dp rank 1: awaiting initial event recovery (connecting)"},
		{"dp worker: every rank exact", Facts{Events: true, Ranks: []RankFacts{exact, {Rank: 1, Stream: StreamExact}}},
			StateExact, ""},
		{"events of another block size", Facts{Events: true, Ranks: []RankFacts{wrongBlocks}},
			StateDegraded, "events carry block size 32 ≠ 16"},
		{"dp worker: block size and a gap, in rank order", Facts{Events: true, Ranks: []RankFacts{
			{Rank: 4, Stream: StreamExact, BlockSize: "events carry block size 32 ≠ 16"},
			{Rank: 5, Stream: StreamDegraded, Reason: "gap 7–9", BlockSize: "events carry block size 8 ≠ 16"}}},
			StateDegraded, "dp rank 4: events carry block size 32 ≠ 16; dp rank 5: events carry block size 8 ≠ 16; dp rank 5: gap 7–9"},
		{"silent while serving", Facts{Events: true, Ranks: []RankFacts{exact}, Silent: true, SilenceWindow: time.Minute},
			StateDegraded, "no events for 60 s while serving requests"},
		{"silence window below a second", Facts{Events: true, Silent: true, SilenceWindow: 1500 * time.Millisecond},
			StateDegraded, "no events for 1.5s while serving requests"},
		{"gap and silence: both reasons", Facts{Events: true, Ranks: []RankFacts{gap}, Silent: true, SilenceWindow: 30 * time.Second},
			StateDegraded, "replay could not cover sequences 812–830; no events for 30 s while serving requests"},
		{"plane worker recovering", Facts{Events: true, Plane: true, PlaneReason: "awaiting initial event recovery"},
			StateDegraded, "awaiting initial event recovery"},
		{"plane worker degraded without a reason", Facts{Events: true, Plane: true}, StateDegraded, "recovering"},
		{"plane worker exact", Facts{Events: true, Plane: true, PlaneExact: true, PlaneReason: "stale"}, StateExact, ""},
		{"down beats everything", Facts{Down: true, DownReason: "health check failed 2 times: connection refused",
			Events: true, Ranks: []RankFacts{gap}, Silent: true, SilenceWindow: time.Minute},
			StateDown, "health check failed 2 times: connection refused"},
		{"down beats approximate", Facts{Down: true, DownReason: "health check failed 3 times: timeout"},
			StateDown, "health check failed 3 times: timeout"},
		{"approximate ignores stale rank facts", Facts{Ranks: []RankFacts{gap}, Silent: true},
			StateApprox, "no event source: approximate mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, why := c.f.State()
			if st != c.state || why != c.reason {
				t.Errorf("got %s %q, want %s %q", st, why, c.state, c.reason)
			}
			if st == StateRefused {
				t.Error("REFUSED is never derived")
			}
		})
	}
}

// TestSilent: silence counts from the later of the last event and the
// start of the requests, and reaches the window exactly at its end.
func TestSilent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := 60 * time.Second
	cases := []struct {
		name            string
		last, busy, now time.Time
		silent          bool
	}{
		{"long idle, requests just started", t0, t0.Add(10 * time.Minute), t0.Add(10 * time.Minute), false},
		{"busy one second short of the window", t0, t0.Add(10 * time.Minute), t0.Add(10*time.Minute + 59*time.Second), false},
		{"busy for the whole window", t0, t0.Add(10 * time.Minute), t0.Add(11 * time.Minute), true},
		{"an event within the window while busy", t0.Add(50 * time.Second), t0, t0.Add(100 * time.Second), false},
		{"last event a window ago while busy", t0.Add(40 * time.Second), t0, t0.Add(100 * time.Second), true},
		{"clock behind the last event", t0, time.Time{}, t0.Add(-time.Second), false},
	}
	for _, c := range cases {
		if got := Silent(c.last, c.busy, c.now, w); got != c.silent {
			t.Errorf("%s: Silent = %v, want %v", c.name, got, c.silent)
		}
	}
}
