package mocker

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/trace"
)

// fleetResult summarises a virtual-clock replay.
type fleetResult struct {
	requests, tokens, cachedTokens, promptTokens int
	steps                                        uint64
	makespan                                     time.Duration
}

// replayFleet plays a Mooncake trace through n engine cores on a virtual
// clock, requests assigned round-robin: each engine steps until its clock
// passes the next arrival, so a request arriving mid-step waits for the
// next step, as in a real engine.
func replayFleet(tb testing.TB, reqs []trace.Request, n int, cfg Config) fleetResult {
	engines := make([]*Engine, n)
	clocks := make([]time.Duration, n)
	for i := range engines {
		engines[i] = mustEngine(tb, cfg)
	}
	var res fleetResult
	collect := func(sr StepResult) {
		for _, o := range sr.Outputs {
			res.tokens++
			if o.First {
				res.cachedTokens += o.CachedTokens
				res.promptTokens += o.PromptTokens
			}
		}
	}
	advance := func(i int, until time.Duration) {
		e := engines[i]
		for !e.Idle() && clocks[i] < until {
			sr := e.Step()
			collect(sr)
			clocks[i] += sr.Duration
		}
		if clocks[i] < until {
			clocks[i] = until
		}
	}
	var toks []uint32
	for k, q := range reqs {
		at := time.Duration(q.Timestamp) * time.Millisecond
		i := k % n
		advance(i, at)
		toks = q.Tokens(toks, uint64(k))
		if err := engines[i].Add(Request{ID: uint64(k), Tokens: toks, MaxTokens: max(q.OutputLength, 1)}); err != nil {
			tb.Fatalf("request %d: %v", k, err)
		}
		res.requests++
	}
	for i := range engines {
		for !engines[i].Idle() {
			sr := engines[i].Step()
			collect(sr)
			clocks[i] += sr.Duration
		}
		res.makespan = max(res.makespan, clocks[i])
		res.steps += engines[i].Stats().Steps
	}
	return res
}

// BenchmarkMooncakeConversation8 replays the whole Mooncake conversation
// trace (12,031 requests, an hour of arrivals) through 8 default engine
// cores on a virtual clock. One op is the whole trace.
func BenchmarkMooncakeConversation8(b *testing.B) {
	reqs, err := trace.Load("conversation")
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	b.ResetTimer()
	var r fleetResult
	for b.Loop() {
		r = replayFleet(b, reqs, 8, cfg)
	}
	b.ReportMetric(float64(r.requests)*float64(b.N)/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(r.steps), "steps")
	b.ReportMetric(r.makespan.Seconds(), "sim-s")
	b.ReportMetric(float64(r.cachedTokens)/float64(r.promptTokens), "hit-ratio")
}

// BenchmarkStepDecode256 is one decode step of a full batch: 256 running
// requests of 512-token prompts, each producing one token (the batch is
// rebuilt, off the clock, when it runs out of tokens).
func BenchmarkStepDecode256(b *testing.B) {
	var e *Engine
	fresh := func() {
		e = mustEngine(b, DefaultConfig())
		for i := range 256 {
			if err := e.Add(Request{ID: uint64(i), Tokens: seqTokens(i*4096, 512), MaxTokens: 3000}); err != nil {
				b.Fatal(err)
			}
		}
		for e.Stats().Waiting > 0 || e.Stats().Running < 256 {
			e.Step()
		}
		e.Step() // the last prefill chunk's first tokens
	}
	fresh()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if res := e.Step(); res.DecodeTokens != 256 {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
	}
}
