package mocker

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"pgregory.net/rapid"
)

// The engine's events, converted to the router's model and applied to the
// router's index (internal/index), give every prompt the overlap score the
// engine itself would find in its cache, on the device and across tiers,
// after every step.
func TestEventsIntoRouterIndex(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := DefaultConfig()
		c.BlockSize = 2
		c.NumGPUBlocks = rapid.IntRange(6, 40).Draw(t, "gpu")
		c.NumCPUBlocks = rapid.SampledFrom([]int{0, 12}).Draw(t, "cpu")
		c.MaxNumBatchedTokens = rapid.IntRange(2, 16).Draw(t, "budget")
		c.Watermark = 0
		e, err := NewEngine(c)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := index.New(index.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		w := kvevent.Worker{ID: 3, Rank: 0}
		var prompts [][]uint32
		var scores index.Scores
		check := func() {
			for _, p := range prompts {
				local, _ := kvhash.LocalHashes(p, kvhash.Options{BlockSize: c.BlockSize}, nil)
				seq := kvhash.SequenceHashes(local, nil)
				dev, any := 0, 0
				for dev < len(seq) {
					if _, ok := e.pool.byHash[seq[dev]]; !ok {
						break
					}
					dev++
				}
				for any < len(seq) {
					_, ok := e.pool.byHash[seq[any]]
					if !ok && (e.cpu == nil || !cpuHas(e.cpu, seq[any])) {
						break
					}
					any++
				}
				ix.Query(local, &scores)
				s := scores.Get(w)
				// With a host tier the index may under-report the host
				// extension: a device removal drops the worker's blocks
				// below it on every tier (see the report of issue 4).
				if s.Tiers[kvevent.TierDevice] != dev || s.Blocks > any || (e.cpu == nil && s.Blocks != any) {
					t.Fatalf("prompt %v: index scores device %d / any %d, engine holds %d / %d", p, s.Tiers[kvevent.TierDevice], s.Blocks, dev, any)
				}
			}
		}
		n := rapid.IntRange(1, 25).Draw(t, "n")
		for i := range n {
			toks := rapid.SliceOfN(rapid.Uint32Range(0, 2), 1, 14).Draw(t, "toks")
			prompts = append(prompts, toks)
			_ = e.Add(Request{ID: uint64(i), Tokens: toks, MaxTokens: rapid.IntRange(1, 4).Draw(t, "max")})
			for range rapid.IntRange(0, 3).Draw(t, "steps") {
				for _, ev := range e.Step().Events {
					kv := ev.KVEvent(w)
					// With a host tier, a host block the index already
					// dropped (see above) comes back as an unknown removal.
					if err := ix.Apply(&kv); err != nil && !(e.cpu != nil && errors.Is(err, index.ErrUnknownBlock)) {
						t.Fatalf("index refused %+v: %v", kv, err)
					}
				}
				check()
			}
		}
	})
}

func cpuHas(c *cpuPool, h uint64) bool { _, ok := c.byHash[h]; return ok }
