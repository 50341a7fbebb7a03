package admission

import (
	"slices"
	"testing"
	"time"
)

// TestHoldWorkedExample checks Hold against a hand-worked example. Gap
// 20 ms, max hold 3 × 20 = 60 ms. Predicted ends at now+90 ms (x) and
// now+100 ms (y), and one already past (z, dropped). A release whose
// prefill takes 85 ms now would end at 85, 5 ms from x. Waits that end it
// 20 ms after an end: x: 90+20−85 = 25 ms (ends at 110, 10 ms from y: no);
// y: 100+20−85 = 35 ms (ends at 120: 30 from x, 20 from y: clear). So
// hold 35 ms; with a 30 ms max hold there is no wait short enough, so 0;
// once y has finished, 25 ms; a 50 ms prefill ends 40 ms before x: 0.
func TestHoldWorkedExample(t *testing.T) {
	ms := time.Millisecond
	now := t0.Add(time.Second)
	start := func(maxHold time.Duration) *Queue {
		q := newQueue(t, func(c *Config) { c.StaggerGap, c.StaggerMaxHold = 20*ms, maxHold })
		startEnds(q, now)
		return q
	}
	q := start(0)
	if !q.Staggers() {
		t.Fatal("a gap of 20 ms should turn staggering on")
	}
	if got := q.Hold(now, 85*ms); got != 35*ms {
		t.Fatalf("hold %v, want 35ms", got)
	}
	if got := q.Hold(now, 50*ms); got != 0 {
		t.Fatalf("a prefill ending 40 ms before the first end: hold %v, want 0", got)
	}
	q.Finished("y")
	if got := q.Hold(now, 85*ms); got != 25*ms {
		t.Fatalf("after y finished: hold %v, want 25ms", got)
	}
	if got := start(30*ms).Hold(now, 85*ms); got != 0 {
		t.Fatalf("max hold 30 ms: hold %v, want 0 (35 ms would be needed)", got)
	}
	// Off: nothing noted, never held.
	off := newQueue(t, nil)
	off.Started("x", now, now.Add(90*ms))
	if off.Staggers() || off.Hold(now, 85*ms) != 0 {
		t.Fatal("staggering is off by default and must never hold")
	}
}

// startEnds notes the worked examples' predicted ends: z already past,
// x at now+90 ms and y at now+100 ms.
func startEnds(q *Queue, now time.Time) {
	ms := time.Millisecond
	q.Started("z", t0, now.Add(-ms))
	q.Started("x", now.Add(-10*ms), now.Add(90*ms))
	q.Started("y", now.Add(-5*ms), now.Add(100*ms))
}

// TestHoldAutoWorkedExample: with StaggerAuto the gap is the held
// request's prefill ÷ (ends not yet past + 1). Ends at now+90 ms (x) and
// now+100 ms (y), one past (z, not counted): a 90 ms prefill gets a gap
// of 90 / 3 = 30 ms (max hold 90 ms). Now it would end at 90, on x.
// Waits: x: 90+30−90 = 30 ms (ends at 120, 20 ms from y: no); y:
// 100+30−90 = 40 ms (ends at 130: 40 from x, 30 from y: clear). So 40 ms.
// Once y has finished the gap is 90 / 2 = 45 ms and the wait after x is
// 90+45−90 = 45 ms. A 30 ms prefill (gap 10 ms) ends at 30, 60 ms before
// x: released at once.
func TestHoldAutoWorkedExample(t *testing.T) {
	ms := time.Millisecond
	now := t0.Add(time.Second)
	q := newQueue(t, func(c *Config) { c.StaggerAuto = true })
	if !q.Staggers() {
		t.Fatal("StaggerAuto should turn staggering on")
	}
	startEnds(q, now)
	if got := q.Hold(now, 90*ms); got != 40*ms {
		t.Fatalf("hold %v, want 40ms", got)
	}
	if got := q.Hold(now, 30*ms); got != 0 {
		t.Fatalf("a 30 ms prefill: hold %v, want 0", got)
	}
	q.Finished("y")
	if got := q.Hold(now, 90*ms); got != 45*ms {
		t.Fatalf("after y finished: hold %v, want 45ms", got)
	}
	if err := (Config{Policy: PolicyFCFS, MaxLen: 1, DefaultWeight: 1, StaggerAuto: true, StaggerGap: ms}).Validate(); err == nil {
		t.Fatal("a gap beside the automatic gap was accepted")
	}
}

// TestCrowdsAndPopUncrowded: a has three requests waiting and b one, so a
// crowds b and b crowds nobody; Pop would release a's first (equal
// virtual times, a's arrived first) but PopUncrowded releases b's. With
// b's in flight and nothing of b waiting, PopUncrowded has nothing to
// give; once b is done a is alone and crowds nobody. Weighted 4, a's
// three count as 3/4 of b's one: then b crowds a.
func TestCrowdsAndPopUncrowded(t *testing.T) {
	q := newQueue(t, nil)
	for _, id := range []string{"a0", "a1", "a2"} {
		mustPush(t, q, Entry{ID: id, Tenant: "a", Arrival: t0})
	}
	mustPush(t, q, Entry{ID: "b0", Tenant: "b", Arrival: t0.Add(time.Millisecond)})
	if !q.Crowds("a") || q.Crowds("b") || q.Crowds("c") {
		t.Fatalf("crowds: a %v b %v c %v, want a only", q.Crowds("a"), q.Crowds("b"), q.Crowds("c"))
	}
	if e, _ := q.Peek(); e.ID != "a0" {
		t.Fatalf("Pop would release %s, want a0", e.ID)
	}
	if !q.Contended() {
		t.Fatal("a and b both waiting: contended")
	}
	if e, ok := q.PopUncrowded(); !ok || e.ID != "b0" {
		t.Fatalf("PopUncrowded released %s %v, want b0", e.ID, ok)
	}
	if !q.Crowds("a") {
		t.Fatal("b's request in flight: a still crowds b")
	}
	if e, ok := q.PopUncrowded(); ok {
		t.Fatalf("PopUncrowded released %s: only a, which crowds, has requests waiting", e.ID)
	}
	q.Done("b")
	if q.Crowds("a") || q.Contended() {
		t.Fatal("a alone crowds nobody and is not contended")
	}

	w := newQueue(t, func(c *Config) { c.Weights = map[string]float64{"a": 4} })
	for _, id := range []string{"a0", "a1", "a2"} {
		mustPush(t, w, Entry{ID: id, Tenant: "a", Arrival: t0})
	}
	mustPush(t, w, Entry{ID: "b0", Tenant: "b", Arrival: t0})
	if w.Crowds("a") || !w.Crowds("b") {
		t.Fatalf("a weighted 4: crowds a %v b %v, want b only", w.Crowds("a"), w.Crowds("b"))
	}
}

// TestBurstCreditWorkedExample: a's ten requests of cost 100 wait; three
// are released (a's virtual time 300, the queue's 200: a2's start tag).
// Then b, new, pushes three of cost 100. Without credit b starts at the
// queue's virtual time, 200: b0 (tag 200) goes before a3 (300), then b1's
// 300 ties a3's and a3 arrived first, so they alternate: b0 a3 b1 a4 b2.
// With a credit of 100 tokens b starts at 100: b0 (100), b1 (200), then
// b2's 300 ties a3: b0 b1 a3 b2 a4. With 200: b starts at 0 and its whole
// burst goes first: b0 b1 b2 a3 a4, and so with any larger credit.
func TestBurstCreditWorkedExample(t *testing.T) {
	order := func(credit float64) []string {
		q := newQueue(t, func(c *Config) { c.BurstCredit = credit })
		for i := range 30 {
			mustPush(t, q, Entry{ID: "a" + string(rune('a'+i)), Tenant: "a", Cost: 100, Arrival: t0})
		}
		for range 3 {
			e, _ := q.Pop()
			q.Done(e.Tenant)
		}
		for _, id := range []string{"b0", "b1", "b2"} {
			mustPush(t, q, Entry{ID: id, Tenant: "b", Cost: 100, Arrival: t0.Add(time.Second)})
		}
		var out []string
		for range 5 {
			e, _ := q.Pop()
			q.Done(e.Tenant)
			out = append(out, e.ID)
		}
		return out
	}
	for _, tc := range []struct {
		credit float64
		want   []string
	}{
		{0, []string{"b0", "ad", "b1", "ae", "b2"}},
		{100, []string{"b0", "b1", "ad", "b2", "ae"}},
		{200, []string{"b0", "b1", "b2", "ad", "ae"}},
		{10_000, []string{"b0", "b1", "b2", "ad", "ae"}},
	} {
		if got := order(tc.credit); !slices.Equal(got, tc.want) {
			t.Errorf("credit %v: released %v, want %v", tc.credit, got, tc.want)
		}
	}
}
