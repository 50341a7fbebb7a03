package mocker

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

func testConfig() Config {
	c := DefaultConfig()
	c.BlockSize = 4
	c.NumGPUBlocks = 64
	c.Watermark = 0
	c.MaxNumBatchedTokens = 64
	return c
}

func mustEngine(t testing.TB, c Config) *Engine {
	t.Helper()
	e, err := NewEngine(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// drain steps until the engine is idle and returns every output.
func drain(t testing.TB, e *Engine) []Output {
	t.Helper()
	var outs []Output
	for i := 0; !e.Idle(); i++ {
		if i > 1_000_000 {
			t.Fatal("engine does not drain")
		}
		res := e.Step()
		outs = append(outs, res.Outputs...)
	}
	return outs
}

func TestTimingPolynomials(t *testing.T) {
	// Worked values of design §3's polynomials.
	if got, want := PrefillMs(1000), 4.209989e-7*1e6+1.518344e-2*1000+16.50142; math.Abs(got-want) > 1e-9 {
		t.Fatalf("PrefillMs(1000) = %v, want %v", got, want)
	}
	if PrefillMs(0) != 0 {
		t.Fatal("PrefillMs(0) must be 0")
	}
	if got := DecodeMs(0); math.Abs(got-5.74) > 1e-12 {
		t.Fatalf("DecodeMs(0) = %v", got)
	}
	if got, want := DecodeMs(0.5), -25.74*0.25+54.01*0.5+5.74; math.Abs(got-want) > 1e-12 {
		t.Fatalf("DecodeMs(0.5) = %v, want %v", got, want)
	}
	c := DefaultConfig()
	c.SpeedupRatio = 2
	c.DecodeSpeedupRatio = 2
	if got, want := c.stepDuration(0, 10, 0, 0), time.Duration(5.74/4*1e6); got != want {
		t.Fatalf("decode-only step = %v, want %v", got, want)
	}
	if got, want := c.stepDuration(100, 10, 0, 0), time.Duration(PrefillMs(110)/2*1e6); got != want {
		t.Fatalf("mixed step = %v, want %v", got, want)
	}
	c = DefaultConfig()
	// 64 tokens × 114688 B / 64e9 B/s = 114.688 µs of transfer.
	if got, want := c.stepDuration(0, 1, 0, 64)-c.stepDuration(0, 1, 0, 0), 114688*time.Nanosecond; got != want {
		t.Fatalf("transfer cost = %v, want %v", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.BlockSize = 0 },
		func(c *Config) { c.NumGPUBlocks = 1 },
		func(c *Config) { c.NumCPUBlocks = -1 },
		func(c *Config) { c.MaxNumSeqs = 0 },
		func(c *Config) { c.MaxNumBatchedTokens = 0 },
		func(c *Config) { c.Watermark = 1 },
		func(c *Config) { c.SpeedupRatio = 0 },
		func(c *Config) { c.DecodeSpeedupRatio = math.NaN() },
		func(c *Config) { c.KVTransferBandwidth = 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("config %+v: got %v, want ErrConfig", c, err)
		}
	}
}

func TestAddRejects(t *testing.T) {
	e := mustEngine(t, testConfig())
	for _, r := range []Request{
		{ID: 1},
		{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 0},
		{ID: 1, Tokens: seqTokens(0, 64*4), MaxTokens: 1}, // 65 blocks > 64
		// Max tokens whose sum with the prompt length overflows an int
		// (it used to wrap to a negative block count and panic in
		// makeslice).
		{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: math.MaxInt},
		{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: math.MaxInt - 2},
		{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 64*4 - 3}, // one token too many
	} {
		if err := e.Add(r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Add(%d tokens, max %d) = %v, want ErrInvalidRequest", len(r.Tokens), r.MaxTokens, err)
		}
	}
	if err := e.Add(Request{ID: 2, Tokens: seqTokens(0, 4), MaxTokens: 64*4 - 4}); err != nil {
		t.Fatalf("prompt and max tokens filling the cache exactly: %v", err)
	}
	if err := e.Add(Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.Add(Request{ID: 1, Tokens: seqTokens(0, 4), MaxTokens: 1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("duplicate id: %v", err)
	}
}

// A repeated prompt is served from the prefix cache: only the tokens after
// the last full cached block (at least one) are prefilled.
func TestPrefixHitCostsNoPrefill(t *testing.T) {
	c := testConfig()
	e := mustEngine(t, c)
	prompt := seqTokens(100, 42) // 10 full blocks of 4 + 2
	if err := e.Add(Request{ID: 1, Tokens: prompt, MaxTokens: 3}); err != nil {
		t.Fatal(err)
	}
	first := e.Step()
	if first.PrefillTokens != 42 || len(first.Outputs) != 1 || first.Outputs[0].CachedTokens != 0 {
		t.Fatalf("cold step: prefill %d, outputs %+v", first.PrefillTokens, first.Outputs)
	}
	if want := time.Duration(PrefillMs(42) * 1e6); first.Duration != want {
		t.Fatalf("cold step duration %v, want %v", first.Duration, want)
	}
	drain(t, e)

	// Same prompt, and a longer one sharing it.
	if err := e.Add(Request{ID: 2, Tokens: prompt, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	res := e.Step()
	if res.PrefillTokens != 2 || res.Outputs[0].CachedTokens != 40 {
		t.Fatalf("warm step: prefill %d, cached %d; want 2 and 40", res.PrefillTokens, res.Outputs[0].CachedTokens)
	}
	longer := append(slices.Clone(prompt[:40]), seqTokens(7000, 9)...)
	if err := e.Add(Request{ID: 3, Tokens: longer, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	res = e.Step()
	if res.PrefillTokens != 9 || res.Outputs[0].CachedTokens != 40 {
		t.Fatalf("shared prefix: prefill %d, cached %d; want 9 and 40", res.PrefillTokens, res.Outputs[0].CachedTokens)
	}
	// A prompt of exactly 3 full blocks, all cached, still recomputes its
	// last token (vLLM), so 2 blocks are hits.
	if err := e.Add(Request{ID: 4, Tokens: prompt[:12], MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if res = e.Step(); res.PrefillTokens != 4 || res.Outputs[0].CachedTokens != 8 {
		t.Fatalf("block-aligned prompt: prefill %d, cached %d; want 4 and 8", res.PrefillTokens, res.Outputs[0].CachedTokens)
	}
	st := e.Stats()
	if st.PrefixQueries != 42+42+49+12 || st.PrefixHits != 40+40+8 {
		t.Fatalf("prefix counters %d/%d", st.PrefixHits, st.PrefixQueries)
	}
}

// Free cached blocks are evicted least recently freed first, and a
// request's own blocks tail-first.
func TestEvictionIsLRU(t *testing.T) {
	c := testConfig()
	c.NumGPUBlocks = 8
	e := mustEngine(t, c)
	// Three one-shot requests of 2 full blocks + 1 token: each holds 3
	// blocks while running and leaves 2 cached blocks.
	run := func(id uint64, start int, n ...int) StepResult {
		length := 9
		if len(n) > 0 {
			length = n[0]
		}
		if err := e.Add(Request{ID: id, Tokens: seqTokens(start, length), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
		return e.Step()
	}
	hashesOf := func(start int) []uint64 {
		r := &request{tokens: seqTokens(start, 9)}
		e.hashUpTo(r, 2)
		return []uint64{EngineHash(r.seq[0], c.HashSeed), EngineHash(r.seq[1], c.HashSeed)}
	}
	a, b := hashesOf(0), hashesOf(100)
	run(1, 0)   // cached: a0 a1 (free), empty: 6
	run(2, 100) // cached: a b (free), empty 4 (3 taken then the partial returned)
	// Touch a again so b becomes the least recently freed.
	if res := run(3, 0); res.Outputs[0].CachedTokens != 8 {
		t.Fatalf("a not cached: %+v", res.Outputs[0])
	}
	// d needs 3 blocks: 4 empty ones remain, so nothing is evicted yet.
	if res := run(4, 200); len(removedOf(res.Events)) != 0 {
		t.Fatalf("unexpected eviction %v", removedOf(res.Events))
	}
	// Now 2 empty blocks; a 5-block request evicts 3 cached blocks: b1, b0
	// (b freed least recently, tail first), then a1.
	res := run(5, 300, 20)
	got := removedOf(res.Events)
	want := []uint64{b[1], b[0], a[1]}
	if !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestEventChainAndParents(t *testing.T) {
	c := testConfig()
	e := mustEngine(t, c)
	if err := e.Add(Request{ID: 1, Tokens: seqTokens(0, 10), MaxTokens: 7}); err != nil {
		t.Fatal(err)
	}
	res := e.Step()
	if len(res.Events) != 1 {
		t.Fatalf("events %+v", res.Events)
	}
	ev := res.Events[0]
	if ev.Kind != kvevent.Stored || ev.HasParent || len(ev.Hashes) != 2 || len(ev.Tokens) != 8 || ev.BlockSize != 4 {
		t.Fatalf("stored event %+v", ev)
	}
	if !slices.Equal(ev.Tokens, seqTokens(0, 8)) {
		t.Fatalf("tokens %v", ev.Tokens)
	}
	// Decode fills block 2 (tokens 8, 9 + two generated) after 2 more steps.
	var later []Event
	for range 3 {
		later = append(later, cloneEvents(e.Step().Events)...)
	}
	if len(later) != 1 || !later[0].HasParent || later[0].Parent != ev.Hashes[1] || len(later[0].Tokens) != 4 {
		t.Fatalf("decode block event %+v (first %v)", later, ev.Hashes)
	}
}

func TestPreemptionRequeuesAndCompletes(t *testing.T) {
	c := testConfig()
	c.NumGPUBlocks = 12
	c.MaxNumBatchedTokens = 256
	e := mustEngine(t, c)
	// Four requests of 8 tokens growing to 24: all admitted (8 blocks), then
	// they outgrow the pool and the newest ones are preempted.
	for i := range 4 {
		if err := e.Add(Request{ID: uint64(i), Tokens: seqTokens(1000*i, 8), MaxTokens: 16}); err != nil {
			t.Fatal(err)
		}
	}
	outs := drain(t, e)
	if e.Stats().Preemptions == 0 {
		t.Fatal("expected preemptions")
	}
	count := map[uint64]int{}
	for _, o := range outs {
		count[o.ID]++
	}
	for i := range 4 {
		if count[uint64(i)] != 16 {
			t.Fatalf("request %d produced %d tokens, want 16", i, count[uint64(i)])
		}
	}
	if st := e.Stats(); st.UsedBlocks != 0 {
		t.Fatalf("blocks leaked: %+v", st)
	}
}

func TestCPUTierOnboard(t *testing.T) {
	c := testConfig()
	c.NumGPUBlocks = 6
	c.NumCPUBlocks = 16
	e := mustEngine(t, c)
	model := newCacheModel()
	step := func() StepResult {
		res := e.Step()
		if err := model.apply(res.Events); err != nil {
			t.Fatal(err)
		}
		return res
	}
	add := func(id uint64, start int) {
		if err := e.Add(Request{ID: id, Tokens: seqTokens(start, 17), MaxTokens: 1}); err != nil {
			t.Fatal(err)
		}
	}
	add(1, 0)
	step() // 4 blocks cached, 5 used, then freed
	add(2, 100)
	res := step() // needs 5 blocks: evicts A's blocks to the CPU tier
	if len(e.CachedHashes(kvevent.TierHostPinned, nil)) == 0 {
		t.Fatalf("nothing offloaded; events %+v", res.Events)
	}
	add(3, 0)
	res = step()
	if res.Outputs[0].CachedTokens != 16 {
		t.Fatalf("host hit: cached %d, want 16", res.Outputs[0].CachedTokens)
	}
	if res.PrefillTokens != 1 {
		t.Fatalf("prefill %d tokens, want 1", res.PrefillTokens)
	}
	if res.Duration <= time.Duration(PrefillMs(1)*1e6) {
		t.Fatalf("no transfer cost in %v", res.Duration)
	}
	for _, tier := range []kvevent.Tier{kvevent.TierDevice, kvevent.TierHostPinned} {
		if !model.equal(tier, e.CachedHashes(tier, nil)) {
			t.Fatalf("tier %v: model and engine differ", tier)
		}
	}
}

func TestResetClears(t *testing.T) {
	e := mustEngine(t, testConfig())
	if err := e.Add(Request{ID: 1, Tokens: seqTokens(0, 9), MaxTokens: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reset(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Reset while busy = %v", err)
	}
	drain(t, e)
	evs, err := e.Reset()
	if err != nil || len(evs) != 1 || evs[0].Kind != kvevent.Cleared {
		t.Fatalf("Reset = %+v, %v", evs, err)
	}
	if st := e.Stats(); st.CachedBlocks != 0 || st.UsedBlocks != 0 {
		t.Fatalf("after reset %+v", st)
	}
}

func TestAbortFreesBlocks(t *testing.T) {
	e := mustEngine(t, testConfig())
	for i := range 3 {
		if err := e.Add(Request{ID: uint64(i), Tokens: seqTokens(0, 30), MaxTokens: 50}); err != nil {
			t.Fatal(err)
		}
	}
	e.Step()
	if !e.Abort(0) || !e.Abort(2) || e.Abort(2) {
		t.Fatal("abort results")
	}
	drain(t, e)
	if st := e.Stats(); st.UsedBlocks != 0 || st.Running != 0 {
		t.Fatalf("after abort and drain %+v", st)
	}
}

func TestDeterministic(t *testing.T) {
	runOnce := func() ([]Output, []Event) {
		c := testConfig()
		c.NumGPUBlocks = 20
		c.NumCPUBlocks = 8
		e := mustEngine(t, c)
		var outs []Output
		var evs []Event
		for i := range 30 {
			_ = e.Add(Request{ID: uint64(i), Tokens: seqTokens((i%4)*16, 10+i%13), MaxTokens: 1 + i%5})
			res := e.Step()
			outs = append(outs, res.Outputs...)
			evs = append(evs, cloneEvents(res.Events)...)
		}
		return append(outs, drain(t, e)...), evs
	}
	o1, e1 := runOnce()
	o2, e2 := runOnce()
	if !slices.Equal(o1, o2) || len(e1) != len(e2) {
		t.Fatal("two identical runs differ")
	}
	for i := range e1 {
		if !slices.Equal(e1[i].Hashes, e2[i].Hashes) || !slices.Equal(e1[i].Tokens, e2[i].Tokens) || e1[i].Parent != e2[i].Parent {
			t.Fatalf("event %d differs", i)
		}
	}
}

func removedOf(evs []Event) []uint64 {
	var out []uint64
	for _, e := range evs {
		if e.Kind == kvevent.Removed {
			out = append(out, e.Hashes...)
		}
	}
	return out
}

func cloneEvents(evs []Event) []Event {
	out := make([]Event, len(evs))
	for i, e := range evs {
		out[i] = e
		out[i].Hashes = slices.Clone(e.Hashes)
		out[i].Tokens = slices.Clone(e.Tokens)
	}
	return out
}
