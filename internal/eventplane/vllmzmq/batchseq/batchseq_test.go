package batchseq

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// tape records what a machine hands its driver, one line per call.
type tape struct {
	lines []string
	bad   map[string]bool // payloads that fail to decode
}

func (r *tape) Batch(seq uint64, payload []byte) error {
	if r.bad[string(payload)] {
		r.lines = append(r.lines, fmt.Sprintf("undecodable %d", seq))
		return errors.New("bad msgpack")
	}
	r.lines = append(r.lines, fmt.Sprintf("batch %d %s", seq, payload))
	return nil
}
func (r *tape) Clear(seq uint64) { r.lines = append(r.lines, fmt.Sprintf("clear after %d", seq)) }
func (r *tape) StateChanged(st State, reason string) {
	r.lines = append(r.lines, st.String()+": "+reason)
}

var counterNames = [...]string{Gaps: "gaps", Duplicates: "duplicates", ClearRestart: "clear_restart",
	ClearGap: "clear_gap", ClearMalformed: "clear_malformed", ReplayOK: "replay_ok", ReplayFailed: "replay_failed"}

func (r *tape) Count(c Counter)            { r.lines = append(r.lines, "+"+counterNames[c]) }
func (r *tape) Note(Level, string, ...any) {}
func (r *tape) take() []string             { l := r.lines; r.lines = nil; return l }
func p(seq uint64, engine string) []byte   { return fmt.Appendf(nil, "%s%d", engine, seq) }

// buffer is a publisher's replay buffer: the batches it still holds.
type buffer struct {
	engine string
	seqs   []uint64
}

// run executes a Step the way the subscriber does, replaying from b.
func run(t *testing.T, m *Machine, st Step, b buffer, err error) {
	t.Helper()
	for st.Replay {
		for _, s := range b.seqs {
			if s >= st.From && !m.ReplayBatch(s, p(s, b.engine)) {
				break
			}
		}
		st = m.ReplayDone(err, false)
	}
}

func expect(t *testing.T, r *tape, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestWithoutReplay: no replay endpoint, so the first batch is joined
// wherever it is, and any gap clears the rank.
func TestWithoutReplay(t *testing.T) {
	r := &tape{}
	m := New(r, false)
	m.Syncing("connecting")
	expect(t, r, "SYNCING: connecting")
	if st := m.Start(); st.Replay {
		t.Fatalf("Start asked for a replay without an endpoint: %+v", st)
	}
	expect(t, r, "EXACT: no replay endpoint: blocks stored before the router connected are invisible until stored again")
	run(t, m, m.Live(5, p(5, "a")), buffer{}, nil)
	run(t, m, m.Live(6, p(6, "a")), buffer{}, nil)
	expect(t, r, "batch 5 a5", "batch 6 a6")
	// 7 and 8 are lost: cleared, 9 applied on the empty rank, Degraded
	// until the next contiguous batch.
	run(t, m, m.Live(9, p(9, "a")), buffer{}, nil)
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 7–8 by replay", "+clear_gap", "clear after 6",
		"DEGRADED: replay could not cover sequences 7–8 (no replay endpoint); the worker rank was cleared", "batch 9 a9")
	run(t, m, m.Live(10, p(10, "a")), buffer{}, nil)
	expect(t, r, "batch 10 a10", "EXACT: stream contiguous again at sequence 10")
	if last, ok := m.Last(); !ok || last != 10 {
		t.Fatalf("Last() = %d, %v; want 10", last, ok)
	}
}

// TestGapRecoveredByReplay: the initial replay, then a gap the buffer
// still covers: nothing is cleared.
func TestGapRecoveredByReplay(t *testing.T) {
	r := &tape{}
	m := New(r, true)
	st := m.Start()
	if st != (Step{Replay: true, From: 0}) {
		t.Fatalf("Start = %+v, want a replay from 0", st)
	}
	run(t, m, st, buffer{"a", []uint64{3, 4}}, nil)
	expect(t, r, "batch 3 a3", "batch 4 a4", "+replay_ok", "EXACT: initial replay applied 2 batches up to sequence 4")
	// 5 and 6 lost on the wire; 7 arrives; the buffer has 5..7.
	st = m.Live(7, p(7, "a"))
	if st != (Step{Replay: true, From: 5}) {
		t.Fatalf("Live(7) = %+v, want a replay from 5", st)
	}
	run(t, m, st, buffer{"a", []uint64{4, 5, 6, 7}}, nil)
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 5–6 by replay", "batch 5 a5", "batch 6 a6", "batch 7 a7",
		"+replay_ok", "EXACT: replay recovered sequences 5–6")
	// The live 7 was applied by the replay: a later copy is a duplicate.
	run(t, m, m.Live(7, p(7, "a")), buffer{}, nil)
	expect(t, r, "+duplicates")
}

// TestGapPastTheBuffer: the buffer no longer holds the gap's first batch:
// the rank is cleared and the live batch applied on it.
func TestGapPastTheBuffer(t *testing.T) {
	r := &tape{}
	m := New(r, true)
	run(t, m, m.Start(), buffer{"a", []uint64{0, 1}}, nil)
	r.take()
	run(t, m, m.Live(5, p(5, "a")), buffer{"a", []uint64{3, 4, 5}}, nil)
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 2–4 by replay", "+replay_failed", "+clear_gap", "clear after 1",
		"DEGRADED: replay could not cover sequences 2–4 (the publisher's buffer resumes at sequence 3 (buffer overrun or lost batches)); the worker rank was cleared",
		"batch 5 a5")
	// A replay that covers the gap recovers it even if the transport
	// then fails (the rank, still proving itself after the clear, turns
	// Exact at the first contiguous batch).
	run(t, m, m.Live(8, p(8, "a")), buffer{"a", []uint64{6, 7, 8}}, errors.New("timeout"))
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 6–7 by replay", "batch 6 a6", "EXACT: stream contiguous again at sequence 6",
		"batch 7 a7", "batch 8 a8", "+replay_failed", "EXACT: replay recovered sequences 6–7")
	// One that does not, fails it.
	run(t, m, m.Live(11, p(11, "a")), buffer{"a", []uint64{9}}, errors.New("timeout"))
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 9–10 by replay", "batch 9 a9", "+replay_failed", "+clear_gap", "clear after 9",
		"DEGRADED: replay could not cover sequences 9–10 (timeout); the worker rank was cleared", "batch 11 a11")
}

// TestRestartAndReconnect: a sequence going back with another payload is
// a restart; a reconnect is checked against the replay buffer's copy of
// the last batch.
func TestRestartAndReconnect(t *testing.T) {
	r := &tape{}
	m := New(r, true)
	run(t, m, m.Start(), buffer{"a", []uint64{0, 1, 2}}, nil)
	r.take()
	// Same engine after a reconnect: its buffer still has batch 2.
	m.Disconnected()
	st := m.Live(3, p(3, "a"))
	if st != (Step{Replay: true, From: 2}) {
		t.Fatalf("Live after a reconnect = %+v, want a replay from 2", st)
	}
	run(t, m, st, buffer{"a", []uint64{1, 2, 3}}, nil)
	expect(t, r, "batch 3 a3")
	// A new engine "b" numbering from 0 again: sequence went back.
	run(t, m, m.Live(1, p(1, "b")), buffer{"b", []uint64{0, 1}}, nil)
	expect(t, r, "+clear_restart", "clear after 3",
		"DEGRADED: sequence went back from 3 to 1: the engine restarted; its blocks were cleared",
		"batch 0 b0", "batch 1 b1", "+replay_ok")
	run(t, m, m.Live(2, p(2, "b")), buffer{}, nil)
	expect(t, r, "batch 2 b2", "EXACT: stream contiguous again at sequence 2")
	// A reconnect to engine "c" whose sequence continues b's: its buffer's
	// batch 2 differs, so it is not the same engine.
	m.Disconnected()
	run(t, m, m.Live(3, p(3, "c")), buffer{"c", []uint64{2, 3}}, nil)
	expect(t, r, "+clear_restart", "clear after 2",
		"DEGRADED: publisher reconnected (sequence 3 after 2) and could not be shown to be the same engine; its blocks were cleared",
		"batch 2 c2", "batch 3 c3", "+replay_ok")
	// A duplicate is only a duplicate with the same payload.
	run(t, m, m.Live(3, p(3, "c")), buffer{}, nil)
	expect(t, r, "+duplicates")
}

// TestUndecodableBatch: a batch that does not decode clears the rank.
func TestUndecodableBatch(t *testing.T) {
	r := &tape{bad: map[string]bool{"a1": true}}
	m := New(r, false)
	m.Start()
	r.take()
	run(t, m, m.Live(0, p(0, "a")), buffer{}, nil)
	run(t, m, m.Live(1, p(1, "a")), buffer{}, nil)
	expect(t, r, "batch 0 a0", "undecodable 1", "+clear_malformed", "clear after 1",
		"DEGRADED: batch 1 could not be decoded (bad msgpack); the worker rank was cleared")
	run(t, m, m.Live(2, p(2, "a")), buffer{}, nil)
	expect(t, r, "batch 2 a2", "EXACT: stream contiguous again at sequence 2")
}

// TestJoinLate: the first live batch after an empty initial replay
// fetches what the buffer holds before it.
func TestJoinLate(t *testing.T) {
	r := &tape{}
	m := New(r, true)
	m.Syncing("connecting")
	run(t, m, m.Start(), buffer{}, errors.New("no answer"))
	expect(t, r, "SYNCING: connecting", "+replay_failed", "EXACT: initial replay failed (no answer): earlier blocks are invisible until stored again")
	run(t, m, m.Live(7, p(7, "a")), buffer{"a", []uint64{5, 6, 7}}, nil)
	expect(t, r, "batch 5 a5", "batch 6 a6", "batch 7 a7", "+replay_ok")
	if st, _ := m.State(); st != StateExact {
		t.Fatalf("state %v, want EXACT", st)
	}
}

// TestGapReplayCancelled: a gap replay cut short because the driver is
// stopping clears nothing.
func TestGapReplayCancelled(t *testing.T) {
	r := &tape{}
	m := New(r, true)
	run(t, m, m.Start(), buffer{"a", []uint64{0}}, nil)
	r.take()
	if st := m.Live(3, p(3, "a")); st != (Step{Replay: true, From: 1}) {
		t.Fatalf("Live(3) = %+v, want a replay from 1", st)
	}
	if next := m.ReplayDone(errors.New("context canceled"), true); next.Replay {
		t.Fatalf("after a cancelled replay: %+v", next)
	}
	expect(t, r, "+gaps", "DEGRADED: recovering sequences 1–2 by replay", "+replay_failed")
	if last, _ := m.Last(); last != 0 {
		t.Fatalf("Last() = %d, want 0", last)
	}
}
