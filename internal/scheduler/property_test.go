package scheduler

import (
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"pgregory.net/rapid"
)

// TestKVCostMatchesFormula draws random knobs and candidates and checks
// every eligible row's cost against DESIGN §1's formula written out
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
				Worker:              kvevent.Worker{ID: kvevent.WorkerID(i)},
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
			want := cfg.PrefillLoadScale*math.Max(raw-credit, 0) + c.DecodeBlocks + cfg.DecodeActiveRequestWeight*float64(c.ActiveRequests)
			if got := d.Candidates[i].Cost; math.Abs(got-want) > 1e-9*math.Max(1, want) {
				rt.Fatalf("row %d cost %v, formula %v", i, got, want)
			}
			best = math.Min(best, d.Candidates[i].Cost)
		}
		if d.ChosenRow().Cost != best {
			rt.Fatalf("chose cost %v, cheapest is %v", d.ChosenRow().Cost, best)
		}
	})
}
