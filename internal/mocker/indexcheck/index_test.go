// Package indexcheck tests the mock engine against the router's index: it
// holds tests only, apart from the mocker core so that the core's own tests
// never depend on the index package building.
package indexcheck

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"pgregory.net/rapid"
)

// The engine's events, converted to the router's model and applied to the
// router's index (internal/index), give every prompt the overlap score the
// engine itself would find in its cache, on the device and across tiers,
// after every step.
func TestEventsIntoRouterIndex(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := mocker.DefaultConfig()
		c.BlockSize = 2
		c.NumGPUBlocks = rapid.IntRange(6, 40).Draw(t, "gpu")
		c.NumCPUBlocks = rapid.SampledFrom([]int{0, 12}).Draw(t, "cpu")
		c.MaxNumBatchedTokens = rapid.IntRange(2, 16).Draw(t, "budget")
		c.Watermark = 0
		e, err := mocker.NewEngine(c)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := index.New(index.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		w := kvevent.WorkerRank{ID: 3, Rank: 0}
		var prompts [][]uint32
		var scores index.Scores
		check := func() {
			dev := toSet(e.CachedHashes(kvevent.TierDevice, nil))
			host := toSet(e.CachedHashes(kvevent.TierHostPinned, nil))
			for _, p := range prompts {
				local, _ := kvhash.LocalHashes(p, kvhash.Options{BlockSize: c.BlockSize}, nil)
				seq := kvhash.SequenceHashes(local, nil)
				nDev, nAny := 0, 0
				for nDev < len(seq) && dev[mocker.EngineHash(seq[nDev], c.HashSeed)] {
					nDev++
				}
				for nAny < len(seq) && (dev[mocker.EngineHash(seq[nAny], c.HashSeed)] || host[mocker.EngineHash(seq[nAny], c.HashSeed)]) {
					nAny++
				}
				ix.Query(local, &scores)
				s := scores.Get(w)
				if int(s.Tiers[kvevent.TierDevice]) != nDev || int(s.Blocks) != nAny {
					t.Fatalf("prompt %v: index scores device %d / any %d, engine holds %d / %d", p, s.Tiers[kvevent.TierDevice], s.Blocks, nDev, nAny)
				}
			}
		}
		n := rapid.IntRange(1, 25).Draw(t, "n")
		for i := range n {
			toks := rapid.SliceOfN(rapid.Uint32Range(0, 2), 1, 14).Draw(t, "toks")
			prompts = append(prompts, toks)
			_ = e.Add(mocker.Request{ID: uint64(i), Tokens: toks, MaxTokens: rapid.IntRange(1, 4).Draw(t, "max")})
			for range rapid.IntRange(0, 3).Draw(t, "steps") {
				for _, ev := range e.Step().Events {
					kv := ev.KVEvent(w)
					// With a host tier, the host LRU can drop a block for
					// good while a child of it is still on the device; by
					// prefix semantics the index drops the child with it,
					// so the child's later device removal is unknown.
					if err := ix.Apply(&kv); err != nil && !(c.NumCPUBlocks > 0 && errors.Is(err, index.ErrUnknownBlock)) {
						t.Fatalf("index refused %+v: %v", kv, err)
					}
				}
				check()
			}
		}
	})
}

func toSet(hs []uint64) map[uint64]bool {
	m := make(map[uint64]bool, len(hs))
	for _, h := range hs {
		m[h] = true
	}
	return m
}
