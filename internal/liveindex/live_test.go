package liveindex

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

var t0 = time.Unix(1_700_000_000, 0)

// engineHash is how the simulated engines name blocks: a chain hash of
// the prefix, salted per worker when salt is set.
func engineHash(prefix []uint64, salt uint64) uint64 {
	h := salt*0x9e3779b97f4a7c15 + 7
	for _, l := range prefix {
		h = (h ^ l) * 0x100000001b3
		h ^= h >> 29
	}
	return h
}

// chain builds a stored event for local hashes ls with engine hashes
// base+i, under parent (0 = root).
func chain(w kvevent.WorkerRank, parent uint64, base uint64, ls ...uint64) kvevent.Event {
	ev := kvevent.Event{Worker: w, Kind: kvevent.Stored, HasParent: parent != 0, Parent: parent}
	for i, l := range ls {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: base + uint64(i), LocalHash: l})
	}
	return ev
}

// Exact workers (two share an id across ranks, so a writer holds both)
// and approximate ones, fed only by Record.
var (
	exact  = []kvevent.WorkerRank{{ID: 1}, {ID: 1, Rank: 1}, {ID: 2}, {ID: 7, Rank: 3}}
	approx = []kvevent.WorkerRank{{ID: 100}, {ID: 101}}
)

func drawPath(t *rapid.T, label string, maxLen int) []uint64 {
	return rapid.SliceOfN(rapid.Uint64Range(1, 3), 1, maxLen).Draw(t, label)
}

// drawEvent draws an event: mostly chains whose engine hashes derive from
// the prefix, with some unknown parents, foreign hashes and odd tiers.
func drawEvent(t *rapid.T, known map[kvevent.WorkerRank][][]uint64) kvevent.Event {
	w := rapid.SampledFrom(exact).Draw(t, "worker")
	salt := uint64(w.ID) * rapid.Uint64Range(0, 1).Draw(t, "salted")
	ev := kvevent.Event{Worker: w, Tier: kvevent.Tier(rapid.SampledFrom([]uint8{0, 0, 0, 1, 2}).Draw(t, "tier"))}
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		ev.Kind = kvevent.Cleared
	case 1, 2, 3:
		ev.Kind = kvevent.Removed
		for range rapid.IntRange(1, 3).Draw(t, "nrem") {
			p := drawPath(t, "remRand", 4)
			if ps := known[w]; len(ps) > 0 && rapid.Bool().Draw(t, "remKnown") {
				p = rapid.SampledFrom(ps).Draw(t, "remPath")
			}
			ev.Removed = append(ev.Removed, engineHash(p, salt))
		}
	default:
		ev.Kind = kvevent.Stored
		var prefix []uint64
		if ps := known[w]; len(ps) > 0 && rapid.IntRange(0, 2).Draw(t, "withParent") > 0 {
			prefix = rapid.SampledFrom(ps).Draw(t, "parentPath")
		} else if rapid.IntRange(0, 5).Draw(t, "randParent") == 0 {
			prefix = drawPath(t, "parentRand", 3)
		}
		if len(prefix) > 0 {
			ev.HasParent, ev.Parent = true, engineHash(prefix, salt)
		}
		p := slices.Clone(prefix)
		for range rapid.IntRange(1, 4).Draw(t, "nblocks") {
			p = append(p, rapid.Uint64Range(1, 3).Draw(t, "local"))
			eh := engineHash(p, salt)
			if rapid.IntRange(0, 20).Draw(t, "foreign") == 0 {
				eh = rapid.Uint64Range(1, 5).Draw(t, "foreignHash")
			}
			ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: eh, LocalHash: p[len(p)-1]})
			known[w] = append(known[w], slices.Clone(p))
		}
	}
	return ev
}

// allPaths is every path up to depth 4 over the alphabet {1, 2, 3}.
func allPaths() [][]uint64 {
	var paths [][]uint64
	var gen func(p []uint64)
	gen = func(p []uint64) {
		if len(p) > 0 {
			paths = append(paths, slices.Clone(p))
		}
		if len(p) < 4 {
			for l := uint64(1); l <= 3; l++ {
				gen(append(p, l))
			}
		}
	}
	gen(nil)
	return paths
}

func sorted(s []index.Score) []index.Score {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b index.Score) int {
		return cmp.Or(cmp.Compare(a.Worker.ID, b.Worker.ID), cmp.Compare(a.Worker.Rank, b.Worker.Rank))
	})
	return out
}

// pair drives a live index and a plain index.Index (which package index
// checks against a naive model) with the same operations.
type pair struct {
	t         *rapid.T
	live      *Index
	plain     *index.Index
	predicted map[kvevent.WorkerRank]bool // worker ranks ever given a Predict
}

// sameScores compares two sorted score lists. A worker rank with both
// event-fed and predicted entries of equal depth has two candidate
// scores, and which one's tier split a query reports depends on the
// order in which its holders were created (holder slots are reused, so
// another writer's removal can reorder them): for such a rank only the
// split's total is compared.
func (p *pair) sameScores(a, b []index.Score) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Worker != y.Worker || x.Blocks != y.Blocks || x.Indexed != y.Indexed {
			return false
		}
		if x.Tiers != y.Tiers {
			sum := int32(0)
			for _, n := range y.Tiers {
				sum += n
			}
			if !p.predicted[x.Worker] || sum != y.Blocks {
				return false
			}
		}
	}
	return true
}

// agree flushes the live index and compares every observable: the scores
// of every path, each worker's indexed count, the counters and the dump.
func (p *pair) agree(when string) {
	if err := p.live.Flush(); err != nil {
		p.t.Fatalf("Flush: %v", err)
	}
	var ls, ps index.Scores
	for _, q := range allPaths() {
		p.live.Query(q, &ls)
		p.plain.Query(q, &ps)
		if pl, ll := sorted(ps.List), sorted(ls.List); !p.sameScores(pl, ll) {
			p.t.Fatalf("%s: query %v: (-plain +live)\n%s", when, q, gocmp.Diff(pl, ll))
		}
	}
	for _, w := range append(slices.Clone(exact), approx...) {
		if l, x := p.live.Indexed(w), p.plain.Indexed(w); l != x {
			p.t.Fatalf("%s: Indexed(%v) = %d live, %d plain", when, w, l, x)
		}
	}
	// Bytes estimates allocated capacity, which depends on the order in
	// which writers grew shared tables; the sizes it derives from (Nodes,
	// Entries) are compared.
	if diff := gocmp.Diff(p.plain.Stats(), p.live.Stats(), cmpopts.IgnoreFields(index.Stats{}, "Bytes")); diff != "" {
		p.t.Fatalf("%s: stats (-plain +live)\n%s", when, diff)
	}
	if diff := gocmp.Diff(p.plain.Dump(), p.live.Dump()); diff != "" {
		p.t.Fatalf("%s: dump (-plain +live)\n%s", when, diff)
	}
}

// TestLiveMatchesPlain is the differential test: on random sequences of
// events, recordings, predictions, expiries, reservations and removals,
// the live index, once flushed, answers exactly as the plain index given
// the same operations in the same order. Operations of one worker keep
// their order on its writer, and most operations of different workers
// commute. Record, Predict and Expire expire entries up to their now
// across the whole tree, so two of them at different instants on
// different writers do not, nor does one of them and a RemoveWorker (the
// removed worker's stale entries count as expired or not): the test
// flushes between such pairs, as a caller must when it needs them
// ordered across workers. Events, reservations and queries stay
// unflushed and interleave freely.
func TestLiveMatchesPlain(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Writers = rapid.IntRange(1, 4).Draw(t, "writers")
		cfg.QueueLen = rapid.SampledFrom([]int{1, 4, 4096}).Draw(t, "queue")
		cfg.Index.ApproxTTL = 10 * time.Second
		cfg.Index.PredictTTL = 3 * time.Second
		live, err := New(cfg)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer live.Close()
		plain, err := index.New(cfg.Index)
		if err != nil {
			t.Fatalf("index.New: %v", err)
		}
		p := &pair{t: t, live: live, plain: plain, predicted: map[kvevent.WorkerRank]bool{}}
		known := map[kvevent.WorkerRank][][]uint64{}
		now := t0
		// What ran since the last flush: timed operations at which
		// instant, and whether a worker was removed.
		var timedAt time.Time
		var timed, removed bool
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 4).Draw(t, "tick")) * time.Second)
			op := rapid.IntRange(0, 15).Draw(t, "op")
			isTimed := op >= 1 && op <= 4
			if (isTimed && (removed || timed && timedAt != now)) || (op == 0 && timed) {
				if err := live.Flush(); err != nil {
					t.Fatalf("Flush: %v", err)
				}
				timed, removed = false, false
			}
			if isTimed {
				timed, timedAt = true, now
			}
			removed = removed || op == 0
			var lerr, perr error
			switch op {
			case 0:
				id := rapid.SampledFrom(append(slices.Clone(exact), approx...)).Draw(t, "rmWorker").ID
				lerr = live.RemoveWorker(id)
				plain.RemoveWorker(id)
			case 1, 2:
				w := rapid.SampledFrom(approx).Draw(t, "recWorker")
				q := drawPath(t, "record", 6)
				lerr, perr = live.Record(w, slices.Clone(q), now), plain.Record(w, slices.Clone(q), now)
			case 3:
				w := rapid.SampledFrom(exact).Draw(t, "predWorker")
				q := drawPath(t, "predict", 6)
				p.predicted[w] = true
				lerr, perr = live.Predict(w, slices.Clone(q), now), plain.Predict(w, slices.Clone(q), now)
			case 4:
				lerr = live.Expire(now)
				plain.Expire(now)
			case 5:
				w := rapid.SampledFrom(exact).Draw(t, "resWorker")
				n := rapid.SampledFrom([]int{0, 1, 2, 7, 40, 3000}).Draw(t, "resBlocks")
				lerr, perr = live.Reserve(w, n), plain.Reserve(w, n)
			case 6:
				p.agree("mid-sequence")
			default:
				ev := drawEvent(t, known)
				cp := ev
				cp.Blocks, cp.Removed = slices.Clone(ev.Blocks), slices.Clone(ev.Removed)
				lerr = live.Apply(ev)
				_ = plain.Apply(&cp) // the event's own errors reach only Stats (and OnError)
			}
			if lerr != nil || perr != nil {
				t.Fatalf("operation refused: live %v, plain %v", lerr, perr)
			}
		}
		p.agree("final")
	})
}

// TestOnErrorSeesEventErrors: an event the tree refuses reaches OnError
// on the writer, with its worker, and is counted either way.
func TestOnErrorSeesEventErrors(t *testing.T) {
	type failure struct {
		w   kvevent.WorkerRank
		err error
	}
	got := make(chan failure, 4)
	cfg := DefaultConfig()
	cfg.OnError = func(w kvevent.WorkerRank, err error) { got <- failure{w, err} }
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := kvevent.WorkerRank{ID: 3, Rank: 1}
	if err := c.Apply(chain(w, 999, 10, 1, 2)); err != nil { // unknown parent
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if f.w != w || f.err == nil {
			t.Fatalf("OnError(%v, %v), want worker %v and an error", f.w, f.err, w)
		}
	default:
		t.Fatal("OnError not called by the time Flush returned")
	}
	if s := c.Stats(); s.UnknownParent != 1 {
		t.Fatalf("UnknownParent = %d, want 1", s.UnknownParent)
	}
}

func TestReserveRefusesOutOfRange(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := kvevent.WorkerRank{ID: 1}
	for _, n := range []int{-1, index.MaxReserveBlocks + 1} {
		if err := c.Reserve(w, n); !errors.Is(err, index.ErrInvalid) {
			t.Errorf("Reserve(%d) = %v, want index.ErrInvalid", n, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Writers = 0 },
		func(c *Config) { c.Writers = 1025 },
		func(c *Config) { c.QueueLen = 0 },
		func(c *Config) { c.Index.ApproxTTL = 0 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if _, err := New(cfg); !errors.Is(err, index.ErrConfig) {
			t.Errorf("New(%+v) = %v, want index.ErrConfig", cfg, err)
		}
	}
}

func TestClosed(t *testing.T) {
	c, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := kvevent.WorkerRank{ID: 1}
	if err := c.Apply(chain(w, 0, 10, 1, 2)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close() // idempotent
	// Close drains the queue: the event is applied and queries still work.
	var s index.Scores
	c.Query([]uint64{1, 2}, &s)
	if got := s.Get(w).Blocks; got != 2 {
		t.Fatalf("after Close, query gives %d blocks, want 2", got)
	}
	for name, err := range map[string]error{
		"Apply":        c.Apply(chain(w, 0, 20, 3)),
		"RemoveWorker": c.RemoveWorker(1),
		"Reserve":      c.Reserve(w, 1),
		"Record":       c.Record(w, []uint64{1}, t0),
		"Predict":      c.Predict(w, []uint64{1}, t0),
		"Expire":       c.Expire(t0),
		"Flush":        c.Flush(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}
