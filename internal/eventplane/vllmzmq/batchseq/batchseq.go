package batchseq

import (
	"fmt"
	"strconv"

	"github.com/zeebo/xxh3"
)

// State is how far the router can trust a worker rank's indexed blocks.
type State uint8

// Stream states. They map onto the router's worker states: Syncing and
// Exact are EXACT once synced, Degraded is DEGRADED.
const (
	// StateSyncing: not connected yet, or the initial replay is running.
	StateSyncing State = iota
	// StateExact: every batch since the last clear was applied in order.
	StateExact
	// StateDegraded: a gap is being recovered, or the rank was cleared
	// because events were lost, and the stream has not yet proved
	// contiguous again.
	StateDegraded
)

// String returns SYNCING, EXACT or DEGRADED.
func (s State) String() string {
	switch s {
	case StateSyncing:
		return "SYNCING"
	case StateExact:
		return "EXACT"
	case StateDegraded:
		return "DEGRADED"
	}
	return "STATE(" + strconv.Itoa(int(s)) + ")"
}

// Counter names what the machine counts (the driver's metrics).
type Counter uint8

// Counters.
const (
	// Gaps counts gaps found in the sequence.
	Gaps Counter = iota
	// Duplicates counts batches dropped as already applied.
	Duplicates
	// ClearRestart counts clears after an engine restart (or a reconnect
	// to an engine not shown to be the same).
	ClearRestart
	// ClearGap counts clears after a gap replay could not cover.
	ClearGap
	// ClearMalformed counts clears after a batch failed to decode.
	ClearMalformed
	// ReplayOK and ReplayFailed count replays by outcome.
	ReplayOK
	ReplayFailed
)

// Level is a note's importance.
type Level uint8

// Note levels.
const (
	Info Level = iota
	Warn
)

// Output is what a machine hands its driver, synchronously, in stream
// order. Its methods must not call back into the machine.
type Output interface {
	// Batch decodes and applies one in-order batch; a non-nil error means
	// it could not be decoded (the machine then clears the rank). It is
	// called after the machine took seq as its last sequence.
	Batch(seq uint64, payload []byte) error
	// Clear drops every block of the worker rank (events were lost); seq
	// is the last sequence applied.
	Clear(seq uint64)
	// StateChanged reports a new state or reason.
	StateChanged(st State, reason string)
	// Count adds one to a counter.
	Count(c Counter)
	// Note is a log line for operators, with slog-style key/value args.
	Note(l Level, msg string, args ...any)
}

// Step is what a machine asks of its driver after an input: when Replay,
// run a replay of every buffered batch from From on, feed each to
// ReplayBatch (stop feeding once it returns false) and the outcome to
// ReplayDone, which returns the next Step.
type Step struct {
	Replay bool
	From   uint64
}

// dedupWindow is how many recent batches are remembered (sequence and
// payload hash) to tell a duplicate from an engine restart.
const dedupWindow = 1024

type recent struct {
	seq, hash uint64
	ok        bool
}

// replayMode is how replayed batches are taken.
type replayMode uint8

const (
	// replayApply applies the batches that extend the stream.
	replayApply replayMode = iota
	// replaySame compares the first batch with the last one applied.
	replaySame
)

// pending is the replay the driver is running and what follows it.
type pending struct {
	mode    replayMode
	applied int
	hole    error
	first   bool // replaySame: no batch seen yet
	same    bool // replaySame: the first batch is the last one applied
	then    func(applied int, err error) Step
}

// Machine is one engine rank's stream state. It is not safe for
// concurrent use: one driver goroutine owns it.
type Machine struct {
	out       Output
	hasReplay bool

	last       uint64
	hasLast    bool
	recovering bool // cleared after lost events; Exact at the next contiguous batch
	suspect    bool // the connection dropped; the next batch may be a new engine's
	ring       [dedupWindow]recent
	state      State
	reason     string
	pend       *pending
	cancelled  bool // the last replay ended because the driver is stopping
}

// New returns a machine in state Syncing that reports to out. hasReplay
// says whether the publisher has a replay endpoint; without one, gaps
// always clear the rank.
func New(out Output, hasReplay bool) *Machine {
	return &Machine{out: out, hasReplay: hasReplay}
}

// Last returns the last sequence applied, if any.
func (m *Machine) Last() (uint64, bool) { return m.last, m.hasLast }

// State returns the current state and its reason.
func (m *Machine) State() (State, string) { return m.state, m.reason }

// Syncing reports state Syncing with reason (the driver is connecting).
func (m *Machine) Syncing(reason string) { m.setState(StateSyncing, reason) }

// Start runs the initial sync: it replays whatever the publisher still
// buffers, so a router that starts next to a running engine sees its
// recent blocks, then reports Exact.
func (m *Machine) Start() Step {
	if !m.hasReplay {
		m.setState(StateExact, "no replay endpoint: blocks stored before the router connected are invisible until stored again")
		return Step{}
	}
	return m.replay(0, replayApply, func(n int, err error) Step {
		switch {
		case err != nil:
			m.setState(StateExact, fmt.Sprintf("initial replay failed (%v): earlier blocks are invisible until stored again", err))
		case n == 0:
			m.setState(StateExact, "initial replay: publisher has nothing buffered")
		default:
			m.setState(StateExact, fmt.Sprintf("initial replay applied %d batches up to sequence %d", n, m.last))
		}
		return Step{}
	})
}

// Disconnected notes that the connection dropped: the engine process may
// have restarted, so the next batch is checked against the replay buffer.
func (m *Machine) Disconnected() { m.suspect = true }

// Live takes one live batch.
func (m *Machine) Live(seq uint64, payload []byte) Step {
	if m.suspect {
		// A new engine's sequence can pass or even continue the old one:
		// ask its replay buffer whether it still has our last batch.
		m.suspect = false
		if m.hasLast {
			r := m.ring[m.last%dedupWindow]
			notSame := func() Step {
				m.lost(StateDegraded, fmt.Sprintf("publisher reconnected (sequence %d after %d) and could not be shown to be the same engine; its blocks were cleared", seq, m.last), ClearRestart)
				m.hasLast = false
				return m.replayThenResume(m.hasReplay, "replay after reconnect failed", seq, payload)
			}
			if !m.hasReplay || !r.ok || r.seq != m.last {
				return notSame()
			}
			p := &pending{mode: replaySame, first: true}
			p.then = func(_ int, err error) Step {
				if err == nil && p.same {
					return m.inOrder(seq, payload)
				}
				return notSame()
			}
			m.pend = p
			return Step{Replay: true, From: m.last}
		}
	}
	return m.inOrder(seq, payload)
}

// inOrder handles a live batch on a connection known to be the engine's.
func (m *Machine) inOrder(seq uint64, payload []byte) Step {
	switch {
	case !m.hasLast:
		join := func() Step {
			return m.resume(seq, payload, func() Step {
				if m.state == StateSyncing {
					m.setState(StateExact, fmt.Sprintf("joined the stream at sequence %d", seq))
				}
				return Step{}
			})
		}
		if seq > 0 && m.hasReplay {
			// Joined late: fetch what the publisher still has.
			return m.replay(0, replayApply, func(_ int, err error) Step {
				if err != nil {
					m.out.Note(Info, "replay on first contact failed", "err", err)
				}
				return join()
			})
		}
		return join()
	case seq == m.last+1:
		m.apply(seq, payload)
		return Step{}
	case seq <= m.last:
		if m.duplicate(seq, payload) {
			m.out.Count(Duplicates)
			return Step{}
		}
		m.lost(StateDegraded, fmt.Sprintf("sequence went back from %d to %d: the engine restarted; its blocks were cleared", m.last, seq), ClearRestart)
		m.hasLast = false
		return m.replayThenResume(seq > 0 && m.hasReplay, "replay after restart failed", seq, payload)
	default:
		return m.gap(seq, payload, func() Step { return Step{} })
	}
}

// replayThenResume follows a clear: replay the buffer when asked, hand on
// the live batch, and stay Degraded until the stream proves contiguous.
func (m *Machine) replayThenResume(replay bool, failed string, seq uint64, payload []byte) Step {
	finish := func() Step {
		return m.resume(seq, payload, func() Step {
			m.recovering = true
			return Step{}
		})
	}
	if !replay {
		return finish()
	}
	return m.replay(0, replayApply, func(_ int, err error) Step {
		if err != nil {
			m.out.Note(Info, failed, "err", err)
		}
		return finish()
	})
}

// resume hands on a live batch after a resync replay: applied if it
// extends the stream, dropped if the replay already applied it, a gap if
// the replay stopped short of it. then runs after.
func (m *Machine) resume(seq uint64, payload []byte, then func() Step) Step {
	switch {
	case !m.hasLast || seq == m.last+1:
		m.apply(seq, payload)
	case seq <= m.last:
	default:
		return m.gap(seq, payload, then)
	}
	return then()
}

// gap recovers the sequences between the last applied one and seq, then
// runs then.
func (m *Machine) gap(seq uint64, payload []byte, then func() Step) Step {
	from, to := m.last+1, seq-1
	m.out.Count(Gaps)
	span := fmt.Sprintf("%d–%d", from, to)
	if from == to {
		span = strconv.FormatUint(from, 10)
	}
	m.setState(StateDegraded, "recovering sequences "+span+" by replay")
	fail := func(why string) Step {
		if m.cancelled {
			return then()
		}
		m.lost(StateDegraded, fmt.Sprintf("replay could not cover sequences %s (%s); the worker rank was cleared", span, why), ClearGap)
		m.last = seq - 1
		m.apply(seq, payload)
		m.recovering = true
		return then()
	}
	if !m.hasReplay {
		return fail("no replay endpoint")
	}
	return m.replay(from, replayApply, func(_ int, err error) Step {
		switch {
		case m.last >= to:
			if seq > m.last {
				m.apply(seq, payload)
			}
			m.recovering = false
			m.setState(StateExact, "replay recovered sequences "+span)
			return then()
		case err != nil:
			return fail(err.Error())
		default:
			return fail("replay ended early")
		}
	})
}

// replay asks the driver for every batch from `from` on.
func (m *Machine) replay(from uint64, mode replayMode, then func(int, error) Step) Step {
	m.pend = &pending{mode: mode, then: then}
	return Step{Replay: true, From: from}
}

// ReplayBatch takes one batch of the replay a Step asked for and reports
// whether the driver should go on feeding it.
func (m *Machine) ReplayBatch(seq uint64, payload []byte) bool {
	p := m.pend
	if p == nil {
		return false
	}
	if p.mode == replaySame {
		if p.first {
			p.first = false
			r := m.ring[m.last%dedupWindow]
			p.same = seq == m.last && r.ok && r.seq == m.last && xxh3.Hash(payload) == r.hash
		}
		return false
	}
	switch {
	case !m.hasLast || seq == m.last+1:
		m.apply(seq, payload)
		p.applied++
	case seq <= m.last:
		// already applied
	default:
		p.hole = fmt.Errorf("the publisher's buffer resumes at sequence %d (buffer overrun or lost batches)", seq)
		return false
	}
	return true
}

// ReplayDone ends the replay a Step asked for: err is its transport
// error, cancelled whether it ended because the driver is stopping. It
// returns the next Step.
func (m *Machine) ReplayDone(err error, cancelled bool) Step {
	p := m.pend
	if p == nil {
		return Step{}
	}
	m.pend = nil
	if p.mode == replayApply {
		if err == nil {
			err = p.hole
		}
		if err != nil {
			m.out.Count(ReplayFailed)
		} else {
			m.out.Count(ReplayOK)
		}
	}
	m.cancelled = cancelled
	next := p.then(p.applied, err)
	m.cancelled = false
	return next
}

// lost clears the worker rank after events were lost.
func (m *Machine) lost(st State, reason string, c Counter) {
	m.out.Count(c)
	m.out.Note(Warn, "KV events lost; clearing the worker rank", "reason", reason)
	m.out.Clear(m.last)
	m.setState(st, reason)
}

// apply takes one in-order batch and hands it to the driver.
func (m *Machine) apply(seq uint64, payload []byte) {
	contiguous := m.hasLast && seq == m.last+1
	m.last, m.hasLast = seq, true
	m.ring[seq%dedupWindow] = recent{seq: seq, hash: xxh3.Hash(payload), ok: true}
	if err := m.out.Batch(seq, payload); err != nil {
		m.lost(StateDegraded, fmt.Sprintf("batch %d could not be decoded (%v); the worker rank was cleared", seq, err), ClearMalformed)
		m.recovering = true
		return
	}
	if m.recovering && contiguous {
		m.recovering = false
		m.setState(StateExact, fmt.Sprintf("stream contiguous again at sequence %d", seq))
	}
}

// duplicate reports whether seq was applied recently with the same payload.
func (m *Machine) duplicate(seq uint64, payload []byte) bool {
	r := m.ring[seq%dedupWindow]
	return r.ok && r.seq == seq && m.last-seq < dedupWindow && r.hash == xxh3.Hash(payload)
}

// setState records and reports a state when it changes.
func (m *Machine) setState(st State, reason string) {
	if m.state == st && m.reason == reason {
		return
	}
	m.state, m.reason = st, reason
	m.out.StateChanged(st, reason)
}
