package workload

import (
	"fmt"
	"sort"
	"time"
)

// MultiTurnConfig describes chat sessions: each session starts with one of
// SystemPrompts shared system prompts, and each turn's prompt is the
// previous turn's prompt, the previous answer and a new user message. So
// turn t of a session shares everything but its last user message with
// turn t+1's prompt, as in the Mooncake conversation trace and llm-d's
// multi-turn shared_prefix mode. Session starts are Poisson at SessionRate;
// a session's turns arrive ThinkTime apart (open loop, like a trace replay).
type MultiTurnConfig struct {
	// Sessions is the number of conversations. Default 64.
	Sessions int
	// Turns is the number of requests per session. Default 8.
	Turns int
	// SystemPrompts is the number of distinct system prompts; session s
	// uses prompt s mod SystemPrompts. Default 8.
	SystemPrompts int
	// SystemPromptLen is the system prompt length in tokens. Default 1024.
	SystemPromptLen int
	// UserLen is the length of each user message in tokens. Default 256.
	UserLen int
	// OutputLen is the length of each answer in tokens. Default 256.
	OutputLen int
	// RangeRatio draws each user and answer length uniformly from
	// [max(1, int(L·RangeRatio)), L], as SGLang does; 1 fixes lengths.
	// Default 1.
	RangeRatio float64
	// SessionRate is the mean rate of new sessions per second (Poisson,
	// first session at 0); +Inf starts all at 0. Default 1.
	SessionRate float64
	// ThinkTime is the gap between the arrivals of consecutive turns of a
	// session. Default 10 s.
	ThinkTime time.Duration
	// Seed drives every draw. Default 1.
	Seed uint64
}

// DefaultMultiTurnConfig returns the defaults above.
func DefaultMultiTurnConfig() MultiTurnConfig {
	return MultiTurnConfig{Sessions: 64, Turns: 8, SystemPrompts: 8, SystemPromptLen: 1024, UserLen: 256,
		OutputLen: 256, RangeRatio: 1, SessionRate: 1, ThinkTime: 10 * time.Second, Seed: 1}
}

// Validate reports the first invalid field.
func (c MultiTurnConfig) Validate() error {
	switch {
	case c.Sessions < 1 || c.Turns < 1 || c.SystemPrompts < 1:
		return fmt.Errorf("%w: sessions, turns and system prompts must be positive", ErrConfig)
	case c.Sessions*c.Turns > 1<<24:
		return fmt.Errorf("%w: %d requests is too many", ErrConfig, c.Sessions*c.Turns)
	case c.SystemPromptLen < 0 || c.UserLen < 1 || c.OutputLen < 1:
		return fmt.Errorf("%w: lengths must be positive", ErrConfig)
	case !(c.RangeRatio > 0 && c.RangeRatio <= 1):
		return fmt.Errorf("%w: range ratio %v must be in (0, 1]", ErrConfig, c.RangeRatio)
	case !(c.SessionRate >= MinRate):
		return fmt.Errorf("%w: session rate %v must be at least %v/s (+Inf for all at once)", ErrConfig, c.SessionRate, MinRate)
	case c.ThinkTime < 0 || c.ThinkTime > 24*time.Hour:
		return fmt.Errorf("%w: think time %v must be in [0, 24h]", ErrConfig, c.ThinkTime)
	}
	return nil
}

// MultiTurn is the open-loop source of MultiTurnConfig.
type MultiTurn struct {
	cfg MultiTurnConfig
	// bounds[s][t] is the end, in the session's own token stream
	// (u0 a0 u1 a1 …), of user message t; the answer follows it.
	bounds [][]int
	outs   [][]int
	plan   []mtItem
	next   int
}

type mtItem struct {
	at            time.Duration
	session, turn int
}

var _ Source = (*MultiTurn)(nil)

// NewMultiTurn draws the plan up front; prompts are built in Next.
func NewMultiTurn(cfg MultiTurnConfig) (*MultiTurn, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &MultiTurn{cfg: cfg}
	r := newRand(cfg.Seed)
	var start time.Duration
	for s := range cfg.Sessions {
		pos := 0
		var bs, outs []int
		for t := range cfg.Turns {
			pos += randLen(r, cfg.UserLen, cfg.RangeRatio)
			bs = append(bs, pos)
			o := randLen(r, cfg.OutputLen, cfg.RangeRatio)
			outs = append(outs, o)
			pos += o
			m.plan = append(m.plan, mtItem{at: start + time.Duration(t)*cfg.ThinkTime, session: s, turn: t})
		}
		m.bounds = append(m.bounds, bs)
		m.outs = append(m.outs, outs)
		start += poissonGap(r, cfg.SessionRate)
	}
	sort.SliceStable(m.plan, func(i, j int) bool { return m.plan[i].at < m.plan[j].at })
	return m, nil
}

// Next implements Source. Session is the session index plus one, Group the
// system prompt index plus one, and Output the answer the next turn's
// prompt contains.
func (m *MultiTurn) Next() (Request, bool) {
	i := m.next
	if i >= len(m.plan) {
		return Request{}, false
	}
	m.next++
	it := m.plan[i]
	sys := it.session % m.cfg.SystemPrompts
	end := m.bounds[it.session][it.turn]
	out := m.outs[it.session][it.turn]
	sid := streamID(m.cfg.Seed, kindSession, uint64(it.session), 0)
	prompt := make([]uint32, 0, m.cfg.SystemPromptLen+end)
	prompt = appendStream(prompt, streamID(m.cfg.Seed, kindSystem, uint64(sys), 0), 0, m.cfg.SystemPromptLen)
	prompt = appendStream(prompt, sid, 0, end)
	return Request{
		ID: i, Arrival: it.at, Prompt: prompt, OutputLen: out,
		Output:  appendStream(make([]uint32, 0, out), sid, end, out),
		Session: it.session + 1, Turn: it.turn, Group: sys + 1,
	}, true
}

// Len implements Source.
func (m *MultiTurn) Len() int { return len(m.plan) }

// Concurrency implements Source: open loop.
func (m *MultiTurn) Concurrency() int { return 0 }
