package sequences

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// chain returns sequence hashes for the given local hashes.
func chain(locals ...uint64) []uint64 { return kvhash.SequenceHashes(locals, nil) }

func newLedger(t *testing.T, cfg Config, workers ...kvevent.WorkerRank) *Ledger {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		tr.AddRank(w)
	}
	return tr
}

func mustLoad(t *testing.T, tr *Ledger, w kvevent.WorkerRank) Load {
	t.Helper()
	l, ok := tr.Load(w)
	if !ok {
		t.Fatalf("worker %v unknown", w)
	}
	return l
}

var (
	wA = kvevent.WorkerRank{ID: 1}
	wB = kvevent.WorkerRank{ID: 2}
)

func TestSharedBlocksCountOncePerWorker(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA, wB)
	p := chain(1, 2, 3, 4)
	q := chain(1, 2, 9) // shares two blocks with p
	must(t, tr.AddRequest(Request{ID: "p", Worker: wA, BlockHashes: p, PrefillTokens: 64}, t0))
	must(t, tr.AddRequest(Request{ID: "q", Worker: wA, BlockHashes: q, PrefillTokens: 10}, t0))
	must(t, tr.AddRequest(Request{ID: "r", Worker: wB, BlockHashes: p, PrefillTokens: 5}, t0))
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 5 || l.ActivePrefillTokens != 74 || l.ActiveRequests != 2 {
		t.Fatalf("worker A load = %+v, want 5 blocks (4 + 1 new), 74 tokens, 2 requests", l)
	}
	if l := mustLoad(t, tr, wB); l.ActiveBlocks != 4 {
		t.Fatalf("worker B blocks = %v, want 4", l.ActiveBlocks)
	}
	if !tr.MarkPrefillCompleted("p") {
		t.Fatal("mark p: unknown")
	}
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 5 || l.ActivePrefillTokens != 10 {
		t.Fatalf("after prefill of p: %+v, want blocks 5, tokens 10", l)
	}
	if !tr.Free("q") || tr.Free("q") {
		t.Fatal("first Free must succeed, second must report unknown")
	}
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 4 || l.ActivePrefillTokens != 0 || l.ActiveRequests != 1 {
		t.Fatalf("after free q: %+v, want 4 blocks, 0 tokens, 1 request", l)
	}
	tr.Free("p")
	tr.Free("r")
	tr.MarkPrefillCompleted("nope")
	for _, w := range []kvevent.WorkerRank{wA, wB} {
		if l := mustLoad(t, tr, w); l != (Load{Worker: w}) {
			t.Fatalf("worker %v not idle: %+v", w, l)
		}
	}
	if got := tr.Stats().UnknownIDs; got != 2 {
		t.Fatalf("unknown ids = %d, want 2 (second Free of q, mark of nope)", got)
	}
}

func TestFreeCompletesPrefill(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA)
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, PrefillTokens: 100}, t0))
	tr.Free("a")
	if l := mustLoad(t, tr, wA); l.ActivePrefillTokens != 0 {
		t.Fatalf("prefill tokens after Free = %d", l.ActivePrefillTokens)
	}
}

func TestAddRequestErrors(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA)
	if err := tr.AddRequest(Request{ID: "x", Worker: wB}, t0); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("unknown worker: err = %v", err)
	}
	must(t, tr.AddRequest(Request{ID: "x", Worker: wA}, t0))
	if err := tr.AddRequest(Request{ID: "x", Worker: wA}, t0); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("duplicate: err = %v", err)
	}
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero config: err = %v", err)
	}
}

func TestPotentialPrefixSemantics(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA, wB, kvevent.WorkerRank{ID: 3})
	// A holds blocks 0..3 of the prompt; B holds 0,1 and a different block 2.
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1, 2, 3, 4)}, t0))
	must(t, tr.AddRequest(Request{ID: "b", Worker: wB, BlockHashes: chain(1, 2, 7, 8, 9)}, t0))
	cand := chain(1, 2, 3, 4, 5, 6)
	got := tr.Potential(cand, ReuseDefault, nil)
	want := []struct {
		active float64
		newB   int
	}{{4, 2}, {5, 4}, {0, 6}}
	for i, w := range want {
		if got[i].ActiveBlocks != w.active || got[i].NewBlocks != w.newB {
			t.Errorf("worker %d: %+v, want active %v new %d", i, got[i], w.active, w.newB)
		}
	}
	if got[0].PotentialDecodeBlocks() != 6 {
		t.Errorf("potential decode blocks = %v, want 6", got[0].PotentialDecodeBlocks())
	}
	if pt := got[1].PotentialPrefillTokens(100, 2, 16); pt != 68 {
		t.Errorf("potential prefill tokens = %d, want 100-32 = 68", pt)
	}
	off := tr.Potential(cand, ReuseOff, nil)
	if off[0].NewBlocks != 6 {
		t.Errorf("reuse off: new blocks = %d, want all 6", off[0].NewBlocks)
	}
}

func TestAssumeKVReuseOff(t *testing.T) {
	for _, reuse := range []bool{true, false} {
		cfg := DefaultConfig()
		cfg.AssumeKVReuse = reuse
		tr := newLedger(t, cfg, wA)
		must(t, tr.AddRequest(Request{ID: "1", Worker: wA, BlockHashes: chain(1, 2, 3)}, t0))
		must(t, tr.AddRequest(Request{ID: "2", Worker: wA, BlockHashes: chain(1, 2, 3)}, t0))
		want := 3.0
		if !reuse {
			want = 6
		}
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want {
			t.Errorf("reuse=%v: blocks %v, want %v", reuse, l.ActiveBlocks, want)
		}
		// The per-request override wins over the config.
		must(t, tr.AddRequest(Request{ID: "3", Worker: wA, BlockHashes: chain(1, 2, 3), Reuse: ReuseOff}, t0))
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want+3 {
			t.Errorf("reuse=%v + private request: blocks %v, want %v", reuse, l.ActiveBlocks, want+3)
		}
	}
}

func TestStride(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ActiveSequenceStride = 4
	tr := newLedger(t, cfg, wA)
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)}, t0))
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 8 {
		t.Fatalf("stride 4, 10 blocks: active %v, want 8 (last incomplete group left out)", l.ActiveBlocks)
	}
	p := tr.Potential(chain(1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14), ReuseDefault, nil)
	if p[0].NewBlocks != 4 {
		t.Fatalf("stride 4: new blocks %d, want 4 (third group differs)", p[0].NewBlocks)
	}
}

func TestTrackingOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TrackActiveBlocks = false
	cfg.TrackPrefillTokens = false
	tr := newLedger(t, cfg, wA)
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1, 2), PrefillTokens: 32}, t0))
	l := tr.Potential(chain(1, 2, 3), ReuseDefault, nil)[0]
	if l.ActiveBlocks != 0 || l.ActivePrefillTokens != 0 || l.NewBlocks != 0 || l.ActiveRequests != 1 {
		t.Fatalf("tracking off: %+v, want only the request count", l)
	}
}

func TestExpiry(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Expiry, cfg.ExpirySweep = 300*time.Second, 30*time.Second
	tr := newLedger(t, cfg, wA)
	must(t, tr.AddRequest(Request{ID: "old", Worker: wA, BlockHashes: chain(1), PrefillTokens: 16}, t0))
	must(t, tr.AddRequest(Request{ID: "new", Worker: wA, BlockHashes: chain(2)}, t0.Add(200*time.Second)))
	if ids := tr.Expire(t0.Add(299 * time.Second)); len(ids) != 0 {
		t.Fatalf("expired too early: %v", ids)
	}
	// The sweep is lazy: the next one is due 30 s after the last.
	if ids := tr.Expire(t0.Add(310 * time.Second)); len(ids) != 0 {
		t.Fatalf("sweep ran before it was due: %v", ids)
	}
	must(t, tr.AddRequest(Request{ID: "x", Worker: wA}, t0.Add(330*time.Second)))
	if tr.Has("old") || !tr.Has("new") {
		t.Fatal("AddRequest's lazy sweep must free old and keep new")
	}
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 1 || l.ActivePrefillTokens != 0 || l.ActiveRequests != 2 {
		t.Fatalf("after expiry: %+v", l)
	}
	if tr.Stats().Expired != 1 {
		t.Fatalf("expired count = %d, want 1", tr.Stats().Expired)
	}
	if tr.Free("old") {
		t.Fatal("Free of an expired request must report unknown")
	}
}

func TestOutputBlocks(t *testing.T) {
	for _, track := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.TrackOutputBlocks = track
		tr := newLedger(t, cfg, wA)
		must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1, 2)}, t0))
		tr.SetGenerated("a", 15)
		want := 2.0
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want {
			t.Errorf("track=%v, 15 tokens: %v blocks, want %v", track, l.ActiveBlocks, want)
		}
		tr.SetGenerated("a", 33) // crosses two boundaries
		if track {
			want = 4
		}
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want {
			t.Errorf("track=%v, 33 tokens: %v blocks, want %v", track, l.ActiveBlocks, want)
		}
		tr.Free("a")
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != 0 {
			t.Errorf("track=%v: blocks after free %v", track, l.ActiveBlocks)
		}
	}
}

func TestExpectedOutputDecay(t *testing.T) {
	for _, track := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.TrackOutputBlocks = track
		tr := newLedger(t, cfg, wA)
		// a and b share block 0; a has blocks 1,2 alone and expects 64 tokens.
		must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1, 2, 3), ExpectedOutputTokens: 64}, t0))
		must(t, tr.AddRequest(Request{ID: "b", Worker: wA, BlockHashes: chain(1)}, t0))
		tr.SetGenerated("a", 48) // 3 output blocks, fraction 1-48/64 = 0.25
		want := 3.0
		if track {
			// shared block 1 + single-ref (2 prompt + 3 output) × 0.25
			want = 1 + 5*0.25
		}
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want {
			t.Errorf("track=%v: %v blocks, want %v", track, l.ActiveBlocks, want)
		}
		tr.SetGenerated("a", 100) // past the end: fraction 0
		if track {
			want = 1
		}
		if l := mustLoad(t, tr, wA); l.ActiveBlocks != want {
			t.Errorf("track=%v, past end: %v blocks, want %v", track, l.ActiveBlocks, want)
		}
	}
}

func TestRemoveWorker(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA, wB)
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, BlockHashes: chain(1)}, t0))
	must(t, tr.AddRequest(Request{ID: "b", Worker: wB, BlockHashes: chain(1)}, t0))
	if ids := tr.RemoveRank(wA); len(ids) != 1 || ids[0] != "a" {
		t.Fatalf("removed ids = %v", ids)
	}
	if tr.Has("a") || len(tr.Workers()) != 1 {
		t.Fatal("worker A's request or slot survived")
	}
	tr.AddRank(wA) // reuses the slot: must start empty
	if p := tr.Potential(chain(1), ReuseDefault, nil); p[0].NewBlocks != 1 || p[1].NewBlocks != 0 {
		t.Fatalf("after re-add: %+v", p)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestManySiblings books more diverging requests than a trie node lists
// before it indexes its children, frees some, and checks every figure.
func TestManySiblings(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA)
	for i := range 12 {
		must(t, tr.AddRequest(Request{ID: fmt.Sprint(i), Worker: wA, BlockHashes: chain(1, 2, uint64(100+i), 7)}, t0))
	}
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 2+12*2 {
		t.Fatalf("12 siblings: %v blocks, want 26", l.ActiveBlocks)
	}
	for i := range 12 {
		if i%3 != 0 {
			tr.Free(fmt.Sprint(i))
		}
	}
	for i := range 12 {
		// A live sibling holds 4 of the candidate's 5 blocks; a freed one
		// leaves only the shared 2.
		want := 3
		if i%3 == 0 {
			want = 1
		}
		if p := tr.Potential(chain(1, 2, uint64(100+i), 7, 8), ReuseDefault, nil)[0]; p.NewBlocks != want {
			t.Fatalf("sibling %d: new blocks %d, want %d", i, p.NewBlocks, want)
		}
	}
	if l := mustLoad(t, tr, wA); l.ActiveBlocks != 2+4*2 {
		t.Fatalf("4 siblings left: %v blocks, want 10", l.ActiveBlocks)
	}
}

// TestPrefillSince walks a rank's prefill stretches: the booking that
// finds nothing pending starts one, a later booking does not, a timed
// completion (or a Free before the first token) that leaves prefill
// pending starts the next, and an untimed one leaves it unknown until
// the rank drains.
func TestPrefillSince(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	since := func(step string, want time.Time) {
		t.Helper()
		if got := tr.PrefillSince(wA); !got.Equal(want) {
			t.Fatalf("%s: PrefillSince %v, want %v", step, got, want)
		}
	}
	since("empty", time.Time{})
	must(t, tr.AddRequest(Request{ID: "decode-only", Worker: wA, PrefillTokens: 0}, at(1)))
	since("a booking with nothing to prefill", time.Time{})
	must(t, tr.AddRequest(Request{ID: "a", Worker: wA, PrefillTokens: 100}, at(2)))
	since("first booking", at(2))
	must(t, tr.AddRequest(Request{ID: "b", Worker: wA, PrefillTokens: 200}, at(3)))
	must(t, tr.AddRequest(Request{ID: "c", Worker: wA, PrefillTokens: 300}, at(4)))
	since("queued behind a", at(2))
	tr.MarkPrefillCompletedAt("a", at(5))
	since("a done, b and c pending", at(5))
	tr.MarkPrefillCompletedAt("a", at(6))
	since("a marked twice", at(5))
	tr.FreeAt("b", at(7)) // cancelled before its first token
	since("b cancelled, c pending", at(7))
	tr.FreeAt("decode-only", at(8))
	since("a request with no prefill left", at(7))
	must(t, tr.AddRequest(Request{ID: "d", Worker: wA, PrefillTokens: 50}, at(9)))
	tr.MarkPrefillCompleted("c")
	if l := mustLoad(t, tr, wA); l.ActivePrefillTokens != 50 || !tr.PrefillSince(wA).IsZero() || !tr.PrefillSinceAt(0).IsZero() {
		t.Fatalf("untimed completion: %+v since %v, want 50 tokens pending since an unknown time", l, tr.PrefillSince(wA))
	}
	tr.MarkPrefillCompletedAt("d", at(10))
	since("drained", time.Time{})
	must(t, tr.AddRequest(Request{ID: "e", Worker: wA, PrefillTokens: 10}, at(11)))
	since("a new stretch after draining", at(11))
	if got := tr.PrefillSinceAt(0); !got.Equal(at(11)) {
		t.Fatalf("PrefillSinceAt(0) %v, want %v", got, at(11))
	}
	if !tr.PrefillSinceAt(1).IsZero() || !tr.PrefillSince(wB).IsZero() {
		t.Fatal("a rank out of range or unknown has a prefill start")
	}
}

// TestITLExposure: running requests expecting 0 (unknown), 1, 2 and 11
// output tokens expose 0 + 0 + 1/1 + 1/10 seconds of mean inter-token
// time per second of stall; freeing the 2-token one leaves 0.1, and an
// idle rank exposes nothing.
func TestITLExposure(t *testing.T) {
	tr := newLedger(t, DefaultConfig(), wA, wB)
	for i, exp := range []int{0, 1, 2, 11} {
		must(t, tr.AddRequest(Request{ID: fmt.Sprint(i), Worker: wA, ExpectedOutputTokens: exp}, t0))
	}
	must(t, tr.AddRequest(Request{ID: "b", Worker: wB, ExpectedOutputTokens: 3}, t0))
	if got := mustLoad(t, tr, wA).ITLExposure; math.Abs(got-1.1) > 1e-12 {
		t.Fatalf("exposure %v, want 1.1", got)
	}
	tr.Free("2")
	if got := mustLoad(t, tr, wA).ITLExposure; math.Abs(got-0.1) > 1e-12 {
		t.Fatalf("after freeing the 2-token request: %v, want 0.1", got)
	}
	if got := mustLoad(t, tr, wB).ITLExposure; math.Abs(got-0.5) > 1e-12 {
		t.Fatalf("other rank: %v, want 0.5", got)
	}
	for _, id := range []string{"0", "1", "3"} {
		tr.Free(id)
	}
	if got := mustLoad(t, tr, wA).ITLExposure; got != 0 {
		t.Fatalf("idle rank: %v, want 0", got)
	}
}
