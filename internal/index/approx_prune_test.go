package index

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// pruneModel is a naive model of the size cap: every (kind, worker rank,
// prefix) entry with its expiry; pruning drops the entry of earliest
// expiry, shallowest first, with every entry of the same holder below it.
type pruneModel struct {
	m               map[holderKey]map[string]time.Time
	expired, pruned uint64
	cap             int
	ratio           float64
}

func (p *pruneModel) count() int {
	n := 0
	for _, ps := range p.m {
		n += len(ps)
	}
	return n
}

// dropBelow deletes prefix k of the holder and every entry extending it.
func dropBelow(ps map[string]time.Time, k string) int {
	n := 0
	for q := range ps {
		if strings.HasPrefix(q, k) {
			delete(ps, q)
			n++
		}
	}
	return n
}

func (p *pruneModel) expire(now time.Time) {
	for _, ps := range p.m {
		for k, e := range ps {
			if _, ok := ps[k]; ok && !e.After(now) {
				p.expired += uint64(dropBelow(ps, k))
			}
		}
	}
}

func (p *pruneModel) record(hk holderKey, path []uint64, exp, now time.Time) {
	p.expire(now)
	if p.m[hk] == nil {
		p.m[hk] = map[string]time.Time{}
	}
	for d := 1; d <= len(path); d++ {
		p.m[hk][key(path[:d])] = exp
	}
	if p.count() <= p.cap {
		return
	}
	target := int(float64(p.cap) * p.ratio)
	for p.count() > target {
		var best holderKey
		var bestK string
		var bestE time.Time
		for h, ps := range p.m {
			for k, e := range ps {
				if bestK == "" || e.Before(bestE) || (e.Equal(bestE) && strings.Count(k, "/") < strings.Count(bestK, "/")) {
					best, bestK, bestE = h, k, e
				}
			}
		}
		p.pruned += uint64(dropBelow(p.m[best], bestK))
	}
}

// The size cap against the naive model: Record and Predict on several
// worker ranks, each call at its own instant and the two TTLs of
// different parity, so no two runs share an expiry and the pruning order
// (earliest expiry, then shallowest) is total. Scores, entry counts and the
// expired/pruned tallies must match.
func TestRecordPruneMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.ApproxTTL = 120 * time.Second
		cfg.PredictTTL = 5*time.Second + time.Millisecond
		cfg.ApproxMaxBlocks = rapid.IntRange(1, 16).Draw(t, "cap")
		cfg.PruneRatio = rapid.SampledFrom([]float64{0.5, 0.8, 1}).Draw(t, "ratio")
		x, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &pruneModel{m: map[holderKey]map[string]time.Time{}, cap: cfg.ApproxMaxBlocks, ratio: cfg.PruneRatio}
		now := t0
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			now = now.Add(time.Duration(2*rapid.SampledFrom([]int{1, 500, 2500, 30_000, 60_000}).Draw(t, "advance")) * time.Millisecond)
			w := rapid.SampledFrom(workers).Draw(t, "worker")
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				x.Expire(now)
				m.expire(now)
			case 1:
				x.RemoveWorker(w.ID)
				for hk := range m.m {
					if hk.w.ID == w.ID {
						delete(m.m, hk)
					}
				}
			case 2:
				p := drawPath(t, "predPath", 6)
				_ = x.Predict(w, p, now)
				m.record(holderKey{w, kindPredict}, p, now.Add(cfg.PredictTTL), now)
			default:
				p := drawPath(t, "recPath", 6)
				_ = x.Record(w, p, now)
				m.record(holderKey{w, kindApprox}, p, now.Add(cfg.ApproxTTL), now)
			}
			q := drawPath(t, "query", 6)
			var want []Score
			for _, w := range workers {
				rec, pred := m.m[holderKey{w, kindApprox}], m.m[holderKey{w, kindPredict}]
				s := Score{Worker: w, Blocks: int32(max(depthIn(rec, q), depthIn(pred, q))), Indexed: int32(len(rec))}
				s.Tiers[0] = s.Blocks
				if s.Blocks > 0 {
					want = append(want, s)
				}
			}
			var got Scores
			x.Query(q, &got)
			list := append([]Score(nil), got.List...)
			sortScores(list)
			sortScores(want)
			if diff := cmp.Diff(want, list); diff != "" {
				t.Fatalf("query %v at %v: (-model +index)\n%s", q, now.Sub(t0), diff)
			}
			st := x.Stats()
			if st.Entries != m.count() || st.Pruned != m.pruned || st.Expired != m.expired || x.approx.entries != m.count() {
				t.Fatalf("at %v: entries %d (approx %d) pruned %d expired %d; model %d, %d, %d",
					now.Sub(t0), st.Entries, x.approx.entries, st.Pruned, st.Expired, m.count(), m.pruned, m.expired)
			}
		}
	})
}

// The byte budget may evict the tail of a recorded run (ties in last use
// go to the highest node id, the deepest here): the rest of the run must
// still expire on time.
func TestBudgetEvictionKeepsRecordedExpiry(t *testing.T) {
	cfg := DefaultConfig()
	// 4 nodes + 4 approximate entries estimate 288 bytes, 3 + 3 216: over
	// 280 the budget evicts down to 252, that is one block.
	cfg.MaxBytes = 280
	x := mustNew(t, cfg)
	if err := x.Record(w1, []uint64{1, 2, 3, 4}, t0); err != nil {
		t.Fatal(err)
	}
	if s := x.Stats(); s.Evicted != 1 || s.Entries != 3 {
		t.Fatalf("after record: %+v, want 1 evicted, 3 entries", s)
	}
	if got := score(x, w1, 1, 2, 3, 4).Blocks; got != 3 {
		t.Fatalf("score %d, want 3", got)
	}
	x.Expire(t0.Add(120 * time.Second))
	if s := x.Stats(); s.Entries != 0 || s.Nodes != 0 || s.Expired != 3 || x.approx.entries != 0 {
		t.Fatalf("after expiry: %+v (approx entries %d), want everything gone", s, x.approx.entries)
	}
}

// Re-recording one prefix many times refreshes its TTL without growing
// the expiry heap without bound, and the last recording is what counts.
func TestRecordRefreshKeepsHeapBounded(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	path := []uint64{1, 2, 3, 4}
	now := t0
	for i := range 20_000 {
		now = t0.Add(time.Duration(i) * time.Millisecond)
		if err := x.Record(w1, path, now); err != nil {
			t.Fatal(err)
		}
		if n := len(x.approx.heap); n > 2*x.approx.entries+1024+1 {
			t.Fatalf("record %d: heap of %d items for %d entries", i, n, x.approx.entries)
		}
	}
	x.Expire(now.Add(120*time.Second - time.Nanosecond))
	if got := score(x, w1, path...).Blocks; got != 4 {
		t.Fatalf("before expiry: %d, want 4", got)
	}
	x.Expire(now.Add(120 * time.Second))
	if s := x.Stats(); s.Entries != 0 || s.Expired != 4 {
		t.Fatalf("after expiry: %+v", s)
	}
	_ = kvevent.WorkerRank{}
}

// Runs recorded at the same instant share an expiry; when one of them was
// partly refreshed since, the size cap still prunes the shallowest entry
// of that expiry first, whichever run it belongs to.
func TestPruneTiesGoShallowestAcrossRuns(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ApproxMaxBlocks = 6
	cfg.PruneRatio = 5.0 / 6
	x := mustNew(t, cfg)
	_ = x.Record(w1, []uint64{1, 2, 3, 4}, t0)
	_ = x.Record(w2, []uint64{5, 6}, t0)
	_ = x.Record(w1, []uint64{1, 2}, t0.Add(time.Second)) // w1's 3, 4 keep the first expiry, at depths 2, 3
	_ = x.Record(w1, []uint64{9}, t0.Add(2*time.Second))  // 7 entries > 6: prune to 5
	// First expiry: w2's 5 (depth 0) goes before w1's 3 (depth 2), with 6.
	if got := score(x, w2, 5, 6).Blocks; got != 0 {
		t.Fatalf("w2: %d, want pruned", got)
	}
	if got := score(x, w1, 1, 2, 3, 4).Blocks; got != 4 {
		t.Fatalf("w1: %d, want 4", got)
	}
	if s := x.Stats(); s.Pruned != 2 || s.Entries != 5 {
		t.Fatalf("stats %+v", s)
	}
}
