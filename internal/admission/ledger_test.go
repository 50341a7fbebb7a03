package admission

import (
	"reflect"
	"testing"
	"time"
)

// TestSharedLedgerCapsAcrossQueues: two queues (two model pools) share a
// ledger with a cap of one request in flight per tenant. Tenant a's
// request released by the first queue holds a's cap in the second too
// (its waiting request is not released, it may not bypass, AtCap says
// so), while b's request there is released; once a's first is done the
// second queue releases a's. A queue with a ledger of its own ignores
// both. Each queue's InFlight counts only its own releases; the ledger
// counts them all.
func TestSharedLedgerCapsAcrossQueues(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TenantInFlight = 1
	l := NewLedger()
	qa, err := NewShared(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	qb, err := NewShared(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	mustPush(t, qa, Entry{ID: "a1", Tenant: "a", Arrival: t0})
	if e, ok := qa.Pop(); !ok || e.ID != "a1" {
		t.Fatalf("first queue released %v %v, want a1", e, ok)
	}
	mustPush(t, qb, Entry{ID: "a2", Tenant: "a", Arrival: t0.Add(time.Millisecond)})
	mustPush(t, qb, Entry{ID: "b1", Tenant: "b", Arrival: t0.Add(2 * time.Millisecond)})
	if !qb.AtCap("a") || qb.MayBypass("a") {
		t.Fatalf("second queue: a at cap %v, may bypass %v; want at cap by the first queue's release", qb.AtCap("a"), qb.MayBypass("a"))
	}
	if e, ok := qb.Pop(); !ok || e.ID != "b1" {
		t.Fatalf("second queue released %v %v, want b1 (a is at its cap)", e, ok)
	}
	if e, ok := qb.Pop(); ok {
		t.Fatalf("second queue released %v while a is at its cap", e)
	}
	if qa.InFlight("a") != 1 || qb.InFlight("a") != 0 || qb.InFlight("b") != 1 || l.InFlight("a") != 1 || l.InFlight("b") != 1 {
		t.Fatalf("in flight: first queue a %d, second a %d b %d, ledger a %d b %d; want 1, 0, 1, 1, 1",
			qa.InFlight("a"), qb.InFlight("a"), qb.InFlight("b"), l.InFlight("a"), l.InFlight("b"))
	}
	qa.Done("a")
	if e, ok := qb.Pop(); !ok || e.ID != "a2" {
		t.Fatalf("after a1 done the second queue released %v %v, want a2", e, ok)
	}
	qa.Done("a") // extra: ignored, the second queue's count stays
	if l.InFlight("a") != 1 {
		t.Fatalf("an extra Done on the first queue took a's count in the ledger to %d, want 1", l.InFlight("a"))
	}
	own := newQueue(t, func(c *Config) { c.TenantInFlight = 1 })
	if own.AtCap("a") || !own.MayBypass("a") {
		t.Fatal("a queue with its own ledger sees the shared ledger's counts")
	}
	qb.Done("a")
	qb.Done("b")
	if !qa.Idle() || !qb.Idle() || l.InFlight("a") != 0 || l.InFlight("b") != 0 || len(l.n) != 0 {
		t.Fatalf("after every Done: idle %v %v, ledger %v", qa.Idle(), qb.Idle(), l.n)
	}
	if _, err := NewShared(cfg, nil); err == nil {
		t.Fatal("NewShared accepted a nil ledger")
	}
}

// TestIdle: a queue is idle only with nothing waiting, in flight or
// predicted to end.
func TestIdle(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.StaggerGap = time.Millisecond })
	if !q.Idle() {
		t.Fatal("a new queue is not idle")
	}
	mustPush(t, q, Entry{ID: "x", Tenant: "a", Arrival: t0})
	if q.Idle() {
		t.Fatal("idle with a request waiting")
	}
	e, _ := q.Pop()
	if q.Idle() {
		t.Fatal("idle with a request in flight")
	}
	q.Started(e.ID, t0, t0.Add(time.Second))
	q.Done(e.Tenant)
	if q.Idle() {
		t.Fatal("idle with a predicted prefill end")
	}
	q.Finished(e.ID)
	if !q.Idle() {
		t.Fatal("not idle once everything ended")
	}
}

// TestMergeViews: two queues' views merge into the sums a reader would
// count by hand, sorted as View sorts and cut to the limit; one queue's
// view merges into its own View.
func TestMergeViews(t *testing.T) {
	qa, qb := newQueue(t, nil), newQueue(t, nil)
	mustPush(t, qa, Entry{ID: "a1", Tenant: "a", Arrival: t0.Add(2 * time.Second)})
	mustPush(t, qa, Entry{ID: "a2", Tenant: "a", Arrival: t0.Add(3 * time.Second)})
	qa.Begin("c")
	mustPush(t, qb, Entry{ID: "a3", Tenant: "a", Arrival: t0.Add(time.Second)})
	mustPush(t, qb, Entry{ID: "b1", Tenant: "b", Arrival: t0.Add(4 * time.Second)})
	qb.Begin("a")
	qb.Begin("c")
	qb.Begin("c")
	got := MergeViews(10, qa.View(1<<30), qb.View(1<<30))
	want := View{Waiting: 4, OldestArrival: t0.Add(time.Second), Tenants: []TenantView{
		{Tenant: "a", Waiting: 3, InFlight: 1, Weight: 1},
		{Tenant: "b", Waiting: 1, Weight: 1},
		{Tenant: "c", InFlight: 3, Weight: 1},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged %+v, want %+v", got, want)
	}
	if got := MergeViews(2, qa.View(1<<30), qb.View(1<<30)); len(got.Tenants) != 2 || got.Tenants[1].Tenant != "b" {
		t.Fatalf("limit 2: %+v", got.Tenants)
	}
	if got, want := MergeViews(1, qa.View(1<<30)), qa.View(1); !reflect.DeepEqual(got, want) {
		t.Fatalf("one queue merged %+v, its view %+v", got, want)
	}
	if got := MergeViews(20); got.Waiting != 0 || !got.OldestArrival.IsZero() || got.Tenants != nil {
		t.Fatalf("no views merged into %+v", got)
	}
}
