package workload

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/trace"
)

var (
	conversationOnce sync.Once
	conversationRows []trace.Request
	conversationErr  error
)

// conversation loads the embedded conversation trace once per test binary
// (parsing it is slow under -race).
func conversation(t testing.TB) []trace.Request {
	t.Helper()
	conversationOnce.Do(func() { conversationRows, conversationErr = trace.Load("conversation") })
	if conversationErr != nil {
		t.Fatal(conversationErr)
	}
	return conversationRows
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func within(t *testing.T, what string, got, want, relTol float64) {
	t.Helper()
	if math.Abs(got-want) > relTol*math.Abs(want) {
		t.Errorf("%s = %.3f, want %.3f ± %.1f%%", what, got, want, 100*relTol)
	}
}

// checkStream checks the Source contract on a drained stream.
func checkStream(t *testing.T, src Source, reqs []Request) {
	t.Helper()
	if len(reqs) != src.Len() {
		t.Fatalf("%d requests, Len %d", len(reqs), src.Len())
	}
	for i, r := range reqs {
		if r.ID != i {
			t.Fatalf("request %d has ID %d", i, r.ID)
		}
		if i > 0 && r.Arrival < reqs[i-1].Arrival {
			t.Fatalf("request %d arrives before request %d", i, i-1)
		}
		if r.OutputLen < 1 {
			t.Fatalf("request %d: output length %d", i, r.OutputLen)
		}
	}
	if _, ok := src.Next(); ok {
		t.Fatal("Next after exhaustion returned a request")
	}
}

func TestPrefixRatioDefaults(t *testing.T) {
	cfg := DefaultPrefixRatioConfig()
	cfg.Requests = 400 // more samples for tighter statistics
	src, err := NewPrefixRatio(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs := Collect(src, 0)
	checkStream(t, src, reqs)
	if src.Concurrency() != 20 || src.PrefixLen() != 7000 {
		t.Fatalf("concurrency %d, prefix %d", src.Concurrency(), src.PrefixLen())
	}
	var isl, osl []float64
	perGroup := map[int]int{}
	first := map[int][]uint32{}
	for _, r := range reqs {
		isl = append(isl, float64(len(r.Prompt)))
		osl = append(osl, float64(r.OutputLen))
		perGroup[r.Group]++
		if r.Arrival != 0 {
			t.Fatal("closed-loop request with an arrival time")
		}
		if f, ok := first[r.Group]; ok {
			// Same group: exactly the prefix is shared (user parts differ
			// from their first token with overwhelming probability).
			if n := commonPrefix(f, r.Prompt); n < 7000 || n > 7002 {
				t.Fatalf("group %d: %d tokens shared, want 7000", r.Group, n)
			}
		} else {
			first[r.Group] = r.Prompt
		}
	}
	// ceil of a Normal(7000, 1750) adds 0.5 on average.
	within(t, "mean ISL", mean(isl), 14000.5, 0.02)
	within(t, "mean OSL", mean(osl), 200, 0.02)
	if len(perGroup) != 20 {
		t.Fatalf("%d groups used, want 20", len(perGroup))
	}
	for g, n := range perGroup {
		if n < 5 || n > 45 { // Binomial(400, 1/20): mean 20, sd 4.4
			t.Errorf("group %d drawn %d times of 400", g, n)
		}
	}
	for g1, p1 := range first {
		for g2, p2 := range first {
			if g1 != g2 && commonPrefix(p1, p2) > 2 {
				t.Fatalf("groups %d and %d share %d tokens", g1, g2, commonPrefix(p1, p2))
			}
		}
	}
}

func TestPrefixRatioSweep(t *testing.T) {
	cfgs := PrefixRatioSweep(DefaultPrefixRatioConfig(), DefaultPrefixRatios)
	for i, c := range cfgs {
		if c.Seed != uint64(i) || c.PrefixRatio != DefaultPrefixRatios[i] {
			t.Fatalf("sweep %d: %+v", i, c)
		}
		c.Requests = 50
		src, err := NewPrefixRatio(c)
		if err != nil {
			t.Fatal(err)
		}
		if want := int(14000 * c.PrefixRatio); src.PrefixLen() != want {
			t.Fatalf("ratio %v: prefix %d, want %d", c.PrefixRatio, src.PrefixLen(), want)
		}
		// Shared fraction: requests of one group share the prefix, so the
		// mean prompt is still about ISL whatever the ratio.
		var isl []float64
		for _, r := range Collect(src, 0) {
			isl = append(isl, float64(len(r.Prompt)))
		}
		within(t, "mean ISL", mean(isl), 14000, 0.05)
	}
}

func TestSharedPrefixDefaults(t *testing.T) {
	src, err := NewSharedPrefix(DefaultSharedPrefixConfig())
	if err != nil {
		t.Fatal(err)
	}
	reqs := Collect(src, 0)
	checkStream(t, src, reqs)
	if len(reqs) != 64*16 || src.Concurrency() != 0 {
		t.Fatalf("%d requests, concurrency %d", len(reqs), src.Concurrency())
	}
	perGroup := map[int]int{}
	first := map[int][]uint32{}
	shuffled := false
	for i, r := range reqs {
		if len(r.Prompt) != 2048+128 || r.OutputLen != 256 || r.Arrival != 0 {
			t.Fatalf("request %d: prompt %d, output %d, arrival %v", i, len(r.Prompt), r.OutputLen, r.Arrival)
		}
		perGroup[r.Group]++
		if f, ok := first[r.Group]; ok {
			if n := commonPrefix(f, r.Prompt); n < 2048 || n > 2050 {
				t.Fatalf("group %d: %d tokens shared, want the 2048-token system prompt", r.Group, n)
			}
		} else {
			first[r.Group] = r.Prompt
		}
		if i > 0 && r.Group < reqs[i-1].Group {
			shuffled = true
		}
	}
	if len(perGroup) != 64 {
		t.Fatalf("%d groups, want 64", len(perGroup))
	}
	for g, n := range perGroup {
		if n != 16 {
			t.Fatalf("group %d has %d prompts, want exactly 16", g, n)
		}
	}
	if !shuffled {
		t.Fatal("rows not shuffled")
	}
	// Ordered keeps groups together.
	cfg := DefaultSharedPrefixConfig()
	cfg.Ordered = true
	o, _ := NewSharedPrefix(cfg)
	ord := Collect(o, 0)
	if !slices.IsSortedFunc(ord, func(a, b Request) int { return a.Group - b.Group }) {
		t.Fatal("ordered rows not grouped")
	}
}

func TestSharedPrefixRangeAndRate(t *testing.T) {
	cfg := DefaultSharedPrefixConfig()
	cfg.RangeRatio = 0.5
	cfg.RequestRate = 10
	src, err := NewSharedPrefix(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs := Collect(src, 0)
	checkStream(t, src, reqs)
	var out, gaps []float64
	sys := map[int]int{}
	first := map[int][]uint32{}
	for i, r := range reqs {
		out = append(out, float64(r.OutputLen))
		if r.OutputLen < 128 || r.OutputLen > 256 {
			t.Fatalf("output %d outside [128, 256]", r.OutputLen)
		}
		if i > 0 {
			gaps = append(gaps, (r.Arrival - reqs[i-1].Arrival).Seconds())
		}
		if f, ok := first[r.Group]; ok {
			n := commonPrefix(f, r.Prompt)
			if s, seen := sys[r.Group]; !seen || n < s {
				sys[r.Group] = n
			}
		} else {
			first[r.Group] = r.Prompt
		}
	}
	if reqs[0].Arrival != 0 {
		t.Fatal("first arrival not at 0")
	}
	var sysLens []float64
	for _, n := range sys {
		sysLens = append(sysLens, float64(n))
	}
	within(t, "mean output", mean(out), (128+256)/2.0, 0.03)
	within(t, "mean gap (s)", mean(gaps), 0.1, 0.1)
	within(t, "mean system prompt", mean(sysLens), (1024+2048)/2.0, 0.1)
}

func TestMultiTurn(t *testing.T) {
	cfg := DefaultMultiTurnConfig()
	src, err := NewMultiTurn(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs := Collect(src, 0)
	checkStream(t, src, reqs)
	if len(reqs) != 64*8 {
		t.Fatalf("%d requests", len(reqs))
	}
	bySession := map[int][]Request{}
	for _, r := range reqs {
		bySession[r.Session] = append(bySession[r.Session], r)
	}
	if len(bySession) != 64 {
		t.Fatalf("%d sessions", len(bySession))
	}
	var starts []float64
	for s, turns := range bySession {
		starts = append(starts, turns[0].Arrival.Seconds())
		if turns[0].Group != (s-1)%8+1 {
			t.Fatalf("session %d uses system prompt %d", s, turns[0].Group)
		}
		for i, r := range turns {
			if r.Turn != i || len(r.Output) != r.OutputLen || r.OutputLen != 256 {
				t.Fatalf("session %d turn %d: %+v", s, i, r.Turn)
			}
			if want := 1024 + (i+1)*256 + i*256; len(r.Prompt) != want {
				t.Fatalf("session %d turn %d: prompt %d, want %d", s, i, len(r.Prompt), want)
			}
			if i == 0 {
				continue
			}
			prev := turns[i-1]
			if r.Arrival-prev.Arrival != 10*time.Second {
				t.Fatalf("turn gap %v", r.Arrival-prev.Arrival)
			}
			hist := slices.Concat(prev.Prompt, prev.Output)
			if !slices.Equal(r.Prompt[:len(hist)], hist) {
				t.Fatalf("session %d turn %d does not extend the previous prompt and answer", s, i)
			}
			if r.Prompt[len(hist)] == prev.Output[0] && slices.Equal(r.Prompt[len(hist):len(hist)+8], prev.Output[:8]) {
				t.Fatal("user message repeats the answer")
			}
		}
	}
	// Different sessions on the same system prompt share exactly it.
	a, b := bySession[1][0].Prompt, bySession[9][0].Prompt
	if n := commonPrefix(a, b); n < 1024 || n > 1026 {
		t.Fatalf("sessions 1 and 9 share %d tokens, want the 1024-token system prompt", n)
	}
	slices.Sort(starts)
	var gaps []float64
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i]-starts[i-1])
	}
	within(t, "mean session gap (s)", mean(gaps), 1, 0.3)
}

func TestMooncakeReplay(t *testing.T) {
	rows := conversation(t)[:200]
	burst, err := NewMooncake(rows, DefaultMooncakeConfig())
	if err != nil {
		t.Fatal(err)
	}
	b := Collect(burst, 0)
	checkStream(t, burst, b)
	for i, r := range b {
		if r.Arrival != time.Duration(rows[i].Timestamp)*time.Millisecond || len(r.Prompt) != rows[i].InputLength ||
			r.OutputLen != max(rows[i].OutputLength, 1) {
			t.Fatalf("request %d: %v/%d/%d vs row %+v", i, r.Arrival, len(r.Prompt), r.OutputLen, rows[i])
		}
	}
	// Every conversation request starts with hash id 0: a shared first block.
	if commonPrefix(b[0].Prompt, b[1].Prompt) < 512 {
		t.Fatal("first block not shared")
	}

	cfg := DefaultMooncakeConfig()
	cfg.Speedup, cfg.Spread, cfg.Seed, cfg.Limit = 2, true, 7, 150
	fast, err := NewMooncake(rows, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := Collect(fast, 0)
	checkStream(t, fast, f)
	if len(f) != 150 {
		t.Fatalf("limit: %d requests", len(f))
	}
	// Find each request's row by its prompt (rows with equal prompts are
	// all candidates) and check the spread arrival is inside its bucket.
	fp := func(p []uint32) uint64 {
		h := uint64(len(p))
		for _, x := range p {
			h = mix64(h ^ uint64(x))
		}
		return h
	}
	byPrompt := map[uint64][]int{}
	for i, q := range rows {
		k := fp(q.Tokens(nil, uint64(i)+1))
		byPrompt[k] = append(byPrompt[k], i)
	}
	distinct := map[time.Duration]bool{}
	matched := 0
	for _, r := range f {
		distinct[r.Arrival] = true
		for _, i := range byPrompt[fp(r.Prompt)] {
			lo := time.Duration(rows[i].Timestamp) * time.Millisecond / 2
			if r.Arrival >= lo && r.Arrival < lo+1500*time.Millisecond {
				matched++
				break
			}
		}
	}
	if matched != len(f) {
		t.Fatalf("%d of %d spread arrivals inside their bucket/2", matched, len(f))
	}
	if len(distinct) < 145 {
		t.Fatalf("spreading left %d distinct arrivals of 150", len(distinct))
	}
	for _, bad := range []MooncakeConfig{{Speedup: 0}, {Speedup: math.Inf(1)}, {Speedup: 1e-9}, {Speedup: 1, Spread: true}, {Speedup: 1, Limit: -1}} {
		if _, err := NewMooncake(rows, bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: err %v", bad, err)
		}
	}
	huge := []trace.Request{{Timestamp: math.MaxInt64 / 2, InputLength: 1, OutputLength: 1}}
	if _, err := NewMooncake(huge, DefaultMooncakeConfig()); !errors.Is(err, ErrConfig) {
		t.Errorf("timestamp overflow: err %v", err)
	}
}

// TestDeterminism builds every source twice with one seed (identical
// streams) and once with another (different streams).
func TestDeterminism(t *testing.T) {
	rows := conversation(t)[:100]
	builders := map[string]func(seed uint64) Source{
		"prefix-ratio": func(seed uint64) Source {
			c := DefaultPrefixRatioConfig()
			c.Seed, c.Requests, c.ISL = seed, 50, 2000
			s, _ := NewPrefixRatio(c)
			return s
		},
		"shared-prefix": func(seed uint64) Source {
			c := DefaultSharedPrefixConfig()
			c.Seed, c.NumGroups, c.RangeRatio, c.RequestRate = seed, 8, 0.5, 5
			s, _ := NewSharedPrefix(c)
			return s
		},
		"multi-turn": func(seed uint64) Source {
			c := DefaultMultiTurnConfig()
			c.Seed, c.Sessions, c.RangeRatio = seed, 8, 0.5
			s, _ := NewMultiTurn(c)
			return s
		},
		"mooncake-spread": func(seed uint64) Source {
			c := DefaultMooncakeConfig()
			c.Seed, c.Spread = seed, true
			s, _ := NewMooncake(rows, c)
			return s
		},
	}
	for name, build := range builders {
		a, b, c := Collect(build(3), 0), Collect(build(3), 0), Collect(build(4), 0)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: same seed, different streams", name)
		}
		if reflect.DeepEqual(a, c) {
			t.Errorf("%s: different seeds, same stream", name)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	pr := DefaultPrefixRatioConfig()
	pr.PrefixRatio = 1.5
	if _, err := NewPrefixRatio(pr); !errors.Is(err, ErrConfig) {
		t.Errorf("prefix ratio 1.5: %v", err)
	}
	pr = DefaultPrefixRatioConfig()
	pr.Concurrency = 0
	if _, err := NewPrefixRatio(pr); !errors.Is(err, ErrConfig) {
		t.Errorf("concurrency 0: %v", err)
	}
	for _, mut := range []func(*SharedPrefixConfig){
		func(c *SharedPrefixConfig) { c.NumGroups = 0 },
		func(c *SharedPrefixConfig) { c.RangeRatio = 0 },
		func(c *SharedPrefixConfig) { c.NumTurns = 2 },
		func(c *SharedPrefixConfig) { c.RequestRate = 0 },
		func(c *SharedPrefixConfig) { c.RequestRate = math.NaN() },
		func(c *SharedPrefixConfig) { c.QuestionLen = 0 },
	} {
		c := DefaultSharedPrefixConfig()
		mut(&c)
		if _, err := NewSharedPrefix(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	for _, mut := range []func(*MultiTurnConfig){
		func(c *MultiTurnConfig) { c.Turns = 0 },
		func(c *MultiTurnConfig) { c.ThinkTime = -1 },
		func(c *MultiTurnConfig) { c.SessionRate = -1 },
		func(c *MultiTurnConfig) { c.Sessions = 1 << 22 },
	} {
		c := DefaultMultiTurnConfig()
		mut(&c)
		if _, err := NewMultiTurn(c); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestSliceSource(t *testing.T) {
	s := NewSlice([]Request{{ID: 9, OutputLen: 1}, {ID: 9, OutputLen: 2}}, 3)
	got := Collect(s, 0)
	if len(got) != 2 || got[0].ID != 0 || got[1].ID != 1 || s.Concurrency() != 3 || s.Len() != 2 {
		t.Fatalf("%+v", got)
	}
	if got := Collect(NewSlice([]Request{{}, {}, {}}, 0), 2); len(got) != 2 {
		t.Fatalf("limit: %d", len(got))
	}
}

func BenchmarkMooncakeNext(b *testing.B) {
	rows, err := trace.Load("conversation")
	if err != nil {
		b.Fatal(err)
	}
	var tokens int
	src, _ := NewMooncake(rows, DefaultMooncakeConfig())
	b.ResetTimer()
	for range b.N {
		r, ok := src.Next()
		if !ok {
			src, _ = NewMooncake(rows, DefaultMooncakeConfig())
			r, _ = src.Next()
		}
		tokens += len(r.Prompt)
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}
