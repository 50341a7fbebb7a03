package mocker

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"pgregory.net/rapid"
)

// checkAccounting verifies the pool against the requests: every block's
// refcount equals the number of running requests holding it, free blocks
// are exactly those with refcount 0, the LRU list holds exactly the free
// cached blocks, and every full block a running request holds is cached.
func checkAccounting(t *rapid.T, e *Engine) {
	p := e.pool
	refs := make([]int32, p.total())
	for _, r := range e.running {
		for i, b := range r.blocks {
			refs[b]++
			if e.cfg.EnablePrefixCaching && (i+1)*e.cfg.BlockSize <= r.numComputed && (!p.cached[b] || p.seq[b] != r.seq[i]) {
				t.Fatalf("request %d holds full block %d uncached", r.id, i)
			}
		}
	}
	for _, r := range e.waiting {
		if len(r.blocks) != 0 {
			t.Fatalf("waiting request %d holds blocks", r.id)
		}
	}
	free := 0
	for b, n := range refs {
		if p.ref[b] != n {
			t.Fatalf("block %d: refcount %d, held %d times", b, p.ref[b], n)
		}
		if n == 0 {
			free++
		}
	}
	if free != p.free() {
		t.Fatalf("free blocks %d, pool says %d", free, p.free())
	}
	lru := 0
	for b := p.head; b != none; b = p.next[b] {
		if p.ref[b] != 0 || !p.cached[b] {
			t.Fatalf("LRU block %d: ref %d cached %v", b, p.ref[b], p.cached[b])
		}
		lru++
	}
	if lru != p.lruLen {
		t.Fatalf("LRU length %d, counted %d", p.lruLen, lru)
	}
	for h, b := range p.byHash {
		if !p.cached[b] || p.seq[b] != h {
			t.Fatalf("hash map entry %d -> %d stale", h, b)
		}
	}
	if e.cpu != nil && e.cpu.len() > e.cpu.cap {
		t.Fatalf("CPU tier over capacity: %d > %d", e.cpu.len(), e.cpu.cap)
	}
}

// Random request streams (with shared prefixes, aborts, small pools that
// force eviction and preemption) keep the accounting exact; events replayed
// into a naive set model reproduce the cached set of both tiers after every
// step; draining frees every block and every request gets exactly its
// tokens; reset leaves an empty cache; with a long-prefill threshold no
// step computes more than it per scheduled request.
func TestPropertyRandomStreams(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := DefaultConfig()
		c.BlockSize = rapid.SampledFrom([]int{1, 2, 4, 16}).Draw(t, "bs")
		c.NumGPUBlocks = rapid.IntRange(8, 80).Draw(t, "gpu")
		c.NumCPUBlocks = rapid.SampledFrom([]int{0, 0, 5, 40}).Draw(t, "cpu")
		c.MaxNumSeqs = rapid.IntRange(1, 8).Draw(t, "seqs")
		c.MaxNumBatchedTokens = rapid.IntRange(1, 64).Draw(t, "budget")
		c.Watermark = rapid.SampledFrom([]float64{0, 0.01, 0.1}).Draw(t, "wm")
		c.EnablePrefixCaching = rapid.Float64().Draw(t, "pc") < 0.9
		c.LongPrefillTokenThreshold = rapid.SampledFrom([]int{0, 0, 1, 3, 16}).Draw(t, "long")
		e, err := NewEngine(c)
		if err != nil {
			t.Fatal(err)
		}
		model := newCacheModel()
		want := map[uint64]int{}
		got := map[uint64]int{}
		prefixes := [][]uint32{seqTokens(0, 40), seqTokens(500, 40), seqTokens(0, 20)}
		step := func() {
			res := e.Step()
			if th := c.LongPrefillTokenThreshold; th > 0 && res.PrefillTokens > th*res.Scheduled {
				t.Fatalf("%d prefill tokens over %d requests: more than the threshold %d each", res.PrefillTokens, res.Scheduled, th)
			}
			for _, o := range res.Outputs {
				got[o.ID]++
				if o.Generated != got[o.ID] || o.First != (got[o.ID] == 1) || o.Finished != (got[o.ID] == want[o.ID]) {
					t.Fatalf("output %+v after %d tokens of %d", o, got[o.ID], want[o.ID])
				}
			}
			if err := model.apply(res.Events); err != nil {
				t.Fatal(err)
			}
			checkAccounting(t, e)
			for _, tier := range []kvevent.Tier{kvevent.TierDevice, kvevent.TierHostPinned} {
				if !model.equal(tier, e.CachedHashes(tier, nil)) {
					t.Fatalf("tier %v: event model differs from engine cache", tier)
				}
			}
			if res.Scheduled > 0 && res.Duration <= 0 {
				t.Fatalf("step did work in %v", res.Duration)
			}
		}
		nOps := rapid.IntRange(1, 60).Draw(t, "ops")
		next := uint64(0)
		for range nOps {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2, 3:
				pre := prefixes[rapid.IntRange(0, len(prefixes)-1).Draw(t, "prefix")]
				cut := rapid.IntRange(0, len(pre)).Draw(t, "cut")
				tail := rapid.SliceOfN(rapid.Uint32Range(0, 9), 0, 20).Draw(t, "tail")
				toks := append(append([]uint32{}, pre[:cut]...), tail...)
				maxT := rapid.IntRange(1, 12).Draw(t, "max")
				if err := e.Add(Request{ID: next, Tokens: toks, MaxTokens: maxT}); err == nil {
					want[next] = maxT
				}
				next++
			case 4:
				if next > 0 {
					id := rapid.Uint64Range(0, next-1).Draw(t, "abort")
					if e.Abort(id) {
						delete(want, id)
						delete(got, id)
					}
				}
			default:
				step()
			}
		}
		for i := 0; !e.Idle(); i++ {
			if i > 100000 {
				t.Fatal("no progress")
			}
			step()
		}
		for id, n := range want {
			if got[id] != n {
				t.Fatalf("request %d got %d tokens, want %d", id, got[id], n)
			}
		}
		if st := e.Stats(); st.UsedBlocks != 0 {
			t.Fatalf("drained engine holds %d blocks", st.UsedBlocks)
		}
		evs, err := e.Reset()
		if err != nil {
			t.Fatal(err)
		}
		if err := model.apply(evs); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.CachedBlocks != 0 || st.CPUBlocks != 0 || len(model.sets[kvevent.TierDevice]) != 0 {
			t.Fatalf("after reset %+v", st)
		}
		checkAccounting(t, e)
	})
}
