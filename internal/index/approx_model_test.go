package index

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// approxModel: per worker rank, recorded and predicted prefixes with their
// expiry; an entry whose ancestor is gone is gone too (prefix semantics).
type approxModel struct {
	rec, pred map[kvevent.WorkerRank]map[string]time.Time
}

func (m *approxModel) put(kind map[kvevent.WorkerRank]map[string]time.Time, w kvevent.WorkerRank, path []uint64, exp time.Time) {
	if kind[w] == nil {
		kind[w] = map[string]time.Time{}
	}
	for d := 1; d <= len(path); d++ {
		kind[w][key(path[:d])] = exp
	}
}

func (m *approxModel) expire(now time.Time) {
	for _, kind := range []map[kvevent.WorkerRank]map[string]time.Time{m.rec, m.pred} {
		for _, ps := range kind {
			for p, e := range ps {
				if !e.After(now) {
					delete(ps, p)
				}
			}
			for p := range ps {
				for i := strings.Index(p, "/"); i >= 0 && i+1 < len(p); {
					if _, ok := ps[p[:i+1]]; !ok {
						delete(ps, p)
						break
					}
					j := strings.Index(p[i+1:], "/")
					if j < 0 {
						break
					}
					i += j + 1
				}
			}
		}
	}
}

func depthIn(ps map[string]time.Time, q []uint64) int {
	d := 0
	for d < len(q) {
		if _, ok := ps[key(q[:d+1])]; !ok {
			break
		}
		d++
	}
	return d
}

// Record, Predict and device-tier exact events for the same workers,
// against the exact model plus the approximate model: one score per worker
// rank, the maximum of its exact, recorded and predicted prefixes.
func TestApproxAndPredictMatchModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x, err := New(DefaultConfig()) // TTL 120 s, predict 5 s
		if err != nil {
			t.Fatal(err)
		}
		ex := newModel()
		am := &approxModel{rec: map[kvevent.WorkerRank]map[string]time.Time{}, pred: map[kvevent.WorkerRank]map[string]time.Time{}}
		known := map[kvevent.WorkerRank][][]uint64{}
		now := t0
		for range rapid.IntRange(1, 50).Draw(t, "steps") {
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0:
				now = now.Add(time.Duration(rapid.SampledFrom([]int{1, 5, 60, 115, 120, 130}).Draw(t, "advance")) * time.Second)
			case 1:
				w := rapid.SampledFrom(workers).Draw(t, "recW")
				p := drawPath(t, "recPath", 5)
				_ = x.Record(w, p, now)
				am.expire(now)
				am.put(am.rec, w, p, now.Add(120*time.Second))
			case 2:
				w := rapid.SampledFrom(workers).Draw(t, "predW")
				p := drawPath(t, "predPath", 5)
				_ = x.Predict(w, p, now)
				am.expire(now)
				am.put(am.pred, w, p, now.Add(5*time.Second))
			case 3:
				x.Expire(now)
				am.expire(now)
			case 4:
				id := rapid.SampledFrom(workers).Draw(t, "rmWorker").ID
				x.RemoveWorker(id)
				ex.removeWorker(id)
				for _, kind := range []map[kvevent.WorkerRank]map[string]time.Time{am.rec, am.pred} {
					for w := range kind {
						if w.ID == id {
							delete(kind, w)
						}
					}
				}
			default:
				ev := genEvent(t, known)
				ev.Tier = kvevent.TierDevice
				_ = x.Apply(&ev)
				ex.apply(ev)
			}
			q := drawPath(t, "query", 6)
			var want []Score
			for _, w := range workers {
				s := Score{Worker: w}
				for _, e := range ex.query(q) {
					if e.Worker == w {
						s.Blocks = e.Blocks
					}
				}
				s.Blocks = max(s.Blocks, int32(depthIn(am.rec[w], q)), int32(depthIn(am.pred[w], q)))
				s.Tiers[0] = s.Blocks
				s.Indexed = int32(len(am.rec[w]))
				if t := ex.w[w]; t != nil {
					seen := map[string]bool{}
					for i := range t {
						for _, e := range t[i] {
							seen[e.prefix] = true
						}
					}
					s.Indexed += int32(len(seen))
				}
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
		}
	})
}
