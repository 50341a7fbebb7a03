package scheduler

import (
	"math"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"pgregory.net/rapid"
)

// TestKVCostMatchesFormula draws random knobs and candidates and checks
// every eligible row's cost against design §1's formula written out
// independently here, and that temperature 0 picks a cheapest row.
func TestKVCostMatchesFormula(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		knob := func(name string, hi float64) float64 { return rapid.Float64Range(0, hi).Draw(rt, name) }
		cfg := Config{
			OverlapScoreCredit:        knob("credit", 2),
			OverlapScoreCreditDecay:   knob("decay", 3),
			PrefillLoadScale:          knob("scale", 3),
			HostCacheHitWeight:        knob("host", 1),
			DiskCacheHitWeight:        knob("disk", 1),
			SharedCacheMultiplier:     knob("shared", 1),
			DecodeActiveRequestWeight: knob("reqw", 2),
			TrackPrefillTokens:        rapid.Bool().Draw(rt, "trackPrefill"),
			PrefillClamp:              rapid.Bool().Draw(rt, "clamp"),
		}
		s, err := New(cfg, KV{})
		if err != nil {
			rt.Fatal(err)
		}
		bs := rapid.SampledFrom([]int{1, 4, 16, 64}).Draw(rt, "bs")
		isl := rapid.IntRange(0, 5000).Draw(rt, "isl")
		n := rapid.IntRange(1, 10).Draw(rt, "n")
		cands := make([]Candidate, n)
		for i := range cands {
			cands[i] = Candidate{
				Worker:              kvevent.WorkerRank{ID: kvevent.WorkerID(i)},
				Overlap:             Overlap{Device: rapid.IntRange(0, 100).Draw(rt, "dev"), Host: rapid.IntRange(0, 50).Draw(rt, "h"), Disk: rapid.IntRange(0, 50).Draw(rt, "d"), Shared: rapid.IntRange(0, 50).Draw(rt, "s")},
				ActivePrefillTokens: rapid.IntRange(0, 20000).Draw(rt, "apt"),
				DecodeBlocks:        float64(rapid.IntRange(0, 3000).Draw(rt, "dec")),
				ActiveRequests:      rapid.IntRange(0, 50).Draw(rt, "req"),
			}
		}
		d, err := s.Select(Request{InputTokens: isl, BlockSize: bs}, cands, seeded(rapid.Uint64().Draw(rt, "seed")))
		if err != nil {
			rt.Fatal(err)
		}
		minAPT := math.MaxInt
		for _, c := range cands {
			minAPT = min(minAPT, c.ActivePrefillTokens)
		}
		best := math.Inf(1)
		for i, c := range cands {
			raw, decay := 0.0, 1.0
			if cfg.TrackPrefillTokens {
				raw = float64(c.ActivePrefillTokens+isl) / float64(bs)
				if reqBlocks := math.Ceil(float64(isl) / float64(bs)); reqBlocks > 0 && cfg.OverlapScoreCreditDecay > 0 {
					decay = 1 / (1 + cfg.OverlapScoreCreditDecay*float64(c.ActivePrefillTokens-minAPT)/float64(bs)/reqBlocks)
				}
			}
			credit := cfg.OverlapScoreCredit*decay*float64(c.Overlap.Device) + cfg.HostCacheHitWeight*float64(c.Overlap.Host) +
				cfg.DiskCacheHitWeight*float64(c.Overlap.Disk) + cfg.SharedCacheMultiplier*float64(c.Overlap.Shared)
			adjusted := raw - credit
			if cfg.PrefillClamp {
				adjusted = math.Max(adjusted, 0)
			}
			want := cfg.PrefillLoadScale*adjusted + c.DecodeBlocks + cfg.DecodeActiveRequestWeight*float64(c.ActiveRequests)
			if got := d.Candidates[i].AdjustedPrefillBlocks; math.Abs(got-adjusted) > 1e-9*math.Max(1, math.Abs(adjusted)) {
				rt.Fatalf("row %d adjusted prefill %v, formula %v", i, got, adjusted)
			}
			if got := d.Candidates[i].Cost; math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
				rt.Fatalf("row %d cost %v, formula %v", i, got, want)
			}
			best = math.Min(best, d.Candidates[i].Cost)
		}
		if d.ChosenRow().Cost != best {
			rt.Fatalf("chose cost %v, cheapest is %v", d.ChosenRow().Cost, best)
		}
	})
}

// TestLongerPrefixNeverCostsMore checks, for both clamp settings, that
// between two candidates with the same load a longer device prefix never
// costs more, and that without the clamp it always costs strictly less
// (positive credit and scale, prefill tracked, no decay), however far the
// credit exceeds the prompt; with the clamp, two prefixes whose credit both
// cover the raw prefill cost the same.
func TestLongerPrefixNeverCostsMore(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.PrefillClamp = rapid.Bool().Draw(rt, "clamp")
		cfg.OverlapScoreCredit = rapid.Float64Range(0.01, 64).Draw(rt, "credit")
		cfg.PrefillLoadScale = rapid.Float64Range(0.01, 64).Draw(rt, "scale")
		s, err := New(cfg, KV{})
		if err != nil {
			rt.Fatal(err)
		}
		bs := rapid.SampledFrom([]int{1, 16, 64}).Draw(rt, "bs")
		isl := rapid.IntRange(1, 20000).Draw(rt, "isl")
		reqBlocks := (isl + bs - 1) / bs
		short := rapid.IntRange(0, reqBlocks-1).Draw(rt, "short")
		long := rapid.IntRange(short+1, reqBlocks).Draw(rt, "long")
		load := Candidate{
			ActivePrefillTokens: rapid.IntRange(0, 50000).Draw(rt, "apt"),
			DecodeBlocks:        float64(rapid.IntRange(0, 5000).Draw(rt, "dec")),
			ActiveRequests:      rapid.IntRange(0, 64).Draw(rt, "req"),
		}
		a, b := load, load
		a.Worker, a.Overlap.Device = w(1), short
		b.Worker, b.Overlap.Device = w(2), long
		d, err := s.Select(Request{InputTokens: isl, BlockSize: bs}, []Candidate{a, b}, seeded(1))
		if err != nil {
			rt.Fatal(err)
		}
		ca, cb := d.Candidates[0].Cost, d.Candidates[1].Cost
		raw := d.Candidates[0].RawPrefillBlocks
		switch {
		case cb > ca:
			rt.Fatalf("longer prefix costs more: %v > %v", cb, ca)
		case !cfg.PrefillClamp && !(cb < ca):
			rt.Fatalf("clamp off: longer prefix costs %v, shorter %v; want strictly less", cb, ca)
		case cfg.PrefillClamp && cfg.OverlapScoreCredit*float64(short) >= raw && cb != ca:
			rt.Fatalf("clamp on, both credits cover raw %v: costs %v and %v, want a tie", raw, ca, cb)
		case !cfg.PrefillClamp && d.Chosen != 1:
			rt.Fatalf("clamp off: chose row %d, want the longer prefix", d.Chosen)
		}
	})
}

// TestSelectIntoMatchesSelect: a decision written into reused storage
// (left dirty by an earlier decision over other candidates, or every
// field of every row set to garbage) equals the one Select allocates, whatever the policy,
// temperature, exclusions and busy rows, and uses that storage when it
// is big enough.
func TestSelectIntoMatchesSelect(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.Temperature = rapid.SampledFrom([]float64{0, 0.5}).Draw(rt, "temp")
		cfg.ActivePrefillTokensThreshold = rapid.SampledFrom([]int{0, 5000}).Draw(rt, "busy")
		name := rapid.SampledFrom([]string{PolicyKV, PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded, PolicyKVTime}).Draw(rt, "policy")
		mk := func() *Scheduler {
			p, _ := NewPolicy(name)
			s, err := New(cfg, p)
			if err != nil {
				rt.Fatal(err)
			}
			return s
		}
		a, b := mk(), mk()
		draw := func(label string) []Candidate {
			cands := make([]Candidate, rapid.IntRange(1, 40).Draw(rt, label+"n"))
			for i := range cands {
				cands[i] = Candidate{
					Worker:              kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1)},
					Down:                rapid.IntRange(0, 5).Draw(rt, label+"down") == 0,
					Overlap:             Overlap{Device: rapid.IntRange(0, 100).Draw(rt, label+"dev")},
					ActivePrefillTokens: rapid.IntRange(0, 8000).Draw(rt, label+"apt"),
					DecodeBlocks:        float64(rapid.IntRange(0, 3000).Draw(rt, label+"dec")),
					ActiveRequests:      rapid.IntRange(0, 5).Draw(rt, label+"req"),
				}
			}
			return cands
		}
		req := Request{InputTokens: rapid.IntRange(0, 5000).Draw(rt, "isl"), BlockSize: 16}
		var rows []Explanation
		for round := range 3 {
			cands := draw("r")
			seed := rapid.Uint64().Draw(rt, "seed")
			want, werr := a.Select(req, cands, seeded(seed))
			if round > 0 && rapid.Bool().Draw(rt, "garbage") {
				for i := range rows[:cap(rows)] {
					fillGarbage(rt, reflect.ValueOf(&rows[:cap(rows)][i]).Elem())
				}
			}
			got, gerr := b.SelectInto(rows, req, cands, seeded(seed))
			if (werr == nil) != (gerr == nil) || !reflect.DeepEqual(got, want) {
				rt.Fatalf("round %d: SelectInto = %+v, %v; Select = %+v, %v", round, got, gerr, want, werr)
			}
			if cap(rows) >= len(cands) && &got.Candidates[0] != &rows[:1][0] {
				rt.Fatalf("round %d: storage of capacity %d not reused for %d rows", round, cap(rows), len(cands))
			}
			rows = got.Candidates
		}
	})
}

// fillGarbage sets every field of v, recursively, to a non-zero value,
// failing on a kind it does not know (so a new field of Explanation is
// covered or the test says so).
func fillGarbage(rt *rapid.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fillGarbage(rt, v.Field(i))
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(-7.25)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.String:
		v.SetString("garbage")
	case reflect.Bool:
		v.SetBool(true)
	default:
		rt.Fatalf("fillGarbage: field kind %v not handled", v.Kind())
	}
}

// kvViaChoose is the kv policy under another type, so the scheduler
// cannot find its argmin in the cost pass and runs KV.Choose instead.
type kvViaChoose struct{ KV }

// TestKVArgminInPassMatchesChoose: the kv policy's temperature-0 choice
// made in the scheduler's cost pass equals KV.Choose's over the eligible
// rows, draw for draw: same decision from the same seed, with many exact
// ties, exclusions, busy rows, and the credit decay on or off (off: the
// pass computes the cost; on: the choice is left to Choose).
func TestKVArgminInPassMatchesChoose(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.ActivePrefillTokensThreshold = rapid.SampledFrom([]int{0, 3000}).Draw(rt, "busy")
		cfg.OverlapScoreCreditDecay = rapid.SampledFrom([]float64{0, 0.5}).Draw(rt, "decay")
		cfg.TrackPrefillTokens = rapid.Bool().Draw(rt, "track")
		a, err := New(cfg, KV{})
		if err != nil {
			rt.Fatal(err)
		}
		b, err := New(cfg, kvViaChoose{})
		if err != nil {
			rt.Fatal(err)
		}
		cands := make([]Candidate, rapid.IntRange(1, 60).Draw(rt, "n"))
		for i := range cands {
			cands[i] = Candidate{
				Worker:              kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1)},
				Down:                rapid.IntRange(0, 6).Draw(rt, "down") == 0,
				Overlap:             Overlap{Device: 16 * rapid.IntRange(0, 2).Draw(rt, "dev")},
				ActivePrefillTokens: 2048 * rapid.IntRange(0, 2).Draw(rt, "apt"),
				DecodeBlocks:        float64(rapid.IntRange(0, 2).Draw(rt, "dec")),
				ActiveRequests:      rapid.IntRange(0, 1).Draw(rt, "req"),
			}
		}
		req := Request{InputTokens: 1024, BlockSize: 16}
		if rapid.Bool().Draw(rt, "pinned") {
			req.AllowedWorkers = []kvevent.WorkerID{1, 3, 5, 8, 13}
		}
		seed := rapid.Uint64().Draw(rt, "seed")
		got, gerr := a.Select(req, cands, seeded(seed))
		want, werr := b.Select(req, cands, seeded(seed))
		want.Policy = got.Policy
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			rt.Fatalf("in the pass: %+v, %v; via Choose: %+v, %v", got, gerr, want, werr)
		}
	})
}

// TestCostInPassMatchesCost: the kv cost the scheduler computes in its
// eligibility pass (written out) has the same bits as cost(), the
// function the credit decay uses, for every eligible row, whatever the
// weights, tiers, clamp and block size.
func TestCostInPassMatchesCost(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := DefaultConfig()
		cfg.TrackPrefillTokens = rapid.Bool().Draw(rt, "track")
		cfg.PrefillClamp = rapid.Bool().Draw(rt, "clamp")
		cfg.OverlapScoreCredit = rapid.Float64Range(0, 2).Draw(rt, "credit")
		cfg.HostCacheHitWeight = rapid.Float64Range(0, 1).Draw(rt, "host")
		cfg.DiskCacheHitWeight = rapid.Float64Range(0, 1).Draw(rt, "disk")
		cfg.SharedCacheMultiplier = rapid.Float64Range(0, 1).Draw(rt, "shared")
		cfg.DecodeActiveRequestWeight = rapid.Float64Range(0, 8).Draw(rt, "active")
		cfg.PrefillLoadScale = rapid.Float64Range(0, 3).Draw(rt, "scale")
		s, err := New(cfg, KV{})
		if err != nil {
			rt.Fatal(err)
		}
		cands := make([]Candidate, rapid.IntRange(1, 40).Draw(rt, "n"))
		for i := range cands {
			cands[i] = Candidate{
				Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1)},
				Overlap: Overlap{Device: rapid.IntRange(0, 300).Draw(rt, "dev"), Host: rapid.IntRange(0, 50).Draw(rt, "host"),
					Disk: rapid.IntRange(0, 50).Draw(rt, "disk"), Shared: rapid.IntRange(0, 50).Draw(rt, "shared")},
				ActivePrefillTokens: rapid.IntRange(0, 40000).Draw(rt, "apt"),
				DecodeBlocks:        rapid.Float64Range(0, 5000).Draw(rt, "dec"),
				ActiveRequests:      rapid.IntRange(0, 20).Draw(rt, "req"),
			}
		}
		req := Request{InputTokens: rapid.IntRange(0, 20000).Draw(rt, "isl"),
			BlockSize: rapid.SampledFrom([]int{1, 16, 48, 64, 100, 128}).Draw(rt, "bs")}
		d, err := s.Select(req, cands, seeded(1))
		if err != nil {
			rt.Fatal(err)
		}
		k := s.knobs(&req)
		for i, row := range d.Candidates {
			if row.Excluded != Eligible {
				continue
			}
			want := row
			want.RawPrefillBlocks, want.CreditBlocks, want.AdjustedPrefillBlocks, want.Cost = 0, 0, 0, 0
			s.cost(&k, &want, 0)
			for _, f := range []struct {
				name      string
				got, want float64
			}{{"raw", row.RawPrefillBlocks, want.RawPrefillBlocks}, {"credit", row.CreditBlocks, want.CreditBlocks},
				{"adjusted", row.AdjustedPrefillBlocks, want.AdjustedPrefillBlocks}, {"cost", row.Cost, want.Cost}} {
				if math.Float64bits(f.got) != math.Float64bits(f.want) {
					rt.Fatalf("row %d %s: in the pass %v, cost() %v", i, f.name, f.got, f.want)
				}
			}
		}
	})
}
