package admission

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func newQueue(t *testing.T, mod func(*Config)) *Queue {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func mustPush(t *testing.T, q *Queue, e Entry) {
	t.Helper()
	if _, out, err := q.Push(e); err != nil || out {
		t.Fatalf("push %s: pushed out %v, %v", e.ID, out, err)
	}
}

// drain pops everything, marking each done at once (so caps never bind).
func drain(q *Queue) []string {
	var out []string
	for {
		e, ok := q.Pop()
		if !ok {
			return out
		}
		out = append(out, e.ID)
		q.Done(e.Tenant)
	}
}

// TestWFQShares is the worked example of weighted fair queueing: tenants
// a (weight 3) and b (weight 1) each have 8 requests of equal cost
// waiting; while both wait, a gets 3 releases for each of b's. Start tags
// (served before release, in cost/weight units of 1 token): a releases at
// 0, 1/3, 2/3, 1, 4/3, ... and b at 0, 1, 2, ...; the lower tag goes first
// and a tie goes to the earlier arrival (a's were pushed first).
func TestWFQShares(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.Weights = map[string]float64{"a": 3} })
	for i := range 8 {
		mustPush(t, q, Entry{ID: fmt.Sprint("a", i), Tenant: "a", Arrival: t0})
	}
	for i := range 8 {
		mustPush(t, q, Entry{ID: fmt.Sprint("b", i), Tenant: "b", Arrival: t0.Add(time.Millisecond)})
	}
	got := strings.Join(drain(q), " ")
	// a:0 a:1/3 a:2/3 | b:0 comes before a:1/3 (0 < 1/3), after a:0 (tie, earlier arrival).
	want := "a0 b0 a1 a2 a3 b1 a4 a5 a6 b2 a7 b3 b4 b5 b6 b7"
	if got != want {
		t.Fatalf("release order\n got %s\nwant %s", got, want)
	}
	// While both wait (the first 8 releases), a gets 3 for each of b's.
	first := strings.Fields(got)[:8]
	na := 0
	for _, id := range first {
		if id[0] == 'a' {
			na++
		}
	}
	if na != 6 {
		t.Fatalf("a got %d of the first 8 releases, want 6 (weight 3:1)", na)
	}
}

// TestWFQCostCharges: the charge is the cost, so a tenant sending prompts
// 4× as long gets a quarter of the releases at equal weight.
func TestWFQCostCharges(t *testing.T) {
	q := newQueue(t, nil)
	for i := range 4 {
		mustPush(t, q, Entry{ID: fmt.Sprint("L", i), Tenant: "long", Cost: 4000, Arrival: t0})
	}
	for i := range 8 {
		mustPush(t, q, Entry{ID: fmt.Sprint("s", i), Tenant: "short", Cost: 1000, Arrival: t0})
	}
	got := strings.Join(drain(q), " ")
	// Start tags: long 0, 4000, 8000, 12000; short 0, 1000, 2000, ...
	// Ties go to push order (long first).
	want := "L0 s0 s1 s2 s3 L1 s4 s5 s6 s7 L2 L3"
	if got != want {
		t.Fatalf("release order\n got %s\nwant %s", got, want)
	}
}

// TestIdleTenantBanksNoCredit: a tenant that was idle while another was
// served starts at the current virtual time, not at zero, so it does not
// monopolise the queue on its return.
func TestIdleTenantBanksNoCredit(t *testing.T) {
	q := newQueue(t, nil)
	for i := range 10 {
		mustPush(t, q, Entry{ID: fmt.Sprint("a", i), Tenant: "a", Arrival: t0})
	}
	for range 6 {
		e, _ := q.Pop()
		q.Done(e.Tenant)
	}
	for i := range 3 {
		mustPush(t, q, Entry{ID: fmt.Sprint("b", i), Tenant: "b", Arrival: t0.Add(time.Second)})
	}
	got := strings.Join(drain(q), " ")
	// vtime is 5 (a's last start tag); b starts at 5, a is at 6: b0 goes
	// first, then they alternate.
	want := "b0 a6 b1 a7 b2 a8 a9"
	if got != want {
		t.Fatalf("release order\n got %s\nwant %s", got, want)
	}
}

// TestWSPTAging is the worked example of aging: with 1000 tokens/s, a
// 10,000-token prompt that arrived at 0 has key 10,000; a 100-token
// prompt arriving at t has key 100 + 1000 t. Shorts that arrived before
// 9.9 s go first; the long one goes before any that arrived after.
func TestWSPTAging(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.Policy, c.AgingTokensPerSecond = PolicyWSPT, 1000 })
	mustPush(t, q, Entry{ID: "long", Cost: 10_000, Arrival: t0})
	for s := 1; s <= 12; s++ {
		mustPush(t, q, Entry{ID: fmt.Sprint("s", s), Cost: 100, Arrival: t0.Add(time.Duration(s) * time.Second)})
	}
	got := strings.Join(drain(q), " ")
	want := "s1 s2 s3 s4 s5 s6 s7 s8 s9 long s10 s11 s12"
	if got != want {
		t.Fatalf("release order\n got %s\nwant %s", got, want)
	}
	// Without aging the long prompt waits for every short one.
	q = newQueue(t, func(c *Config) { c.Policy, c.AgingTokensPerSecond = PolicyWSPT, 0 })
	mustPush(t, q, Entry{ID: "long", Cost: 10_000, Arrival: t0})
	for s := 1; s <= 3; s++ {
		mustPush(t, q, Entry{ID: fmt.Sprint("s", s), Cost: float64(400 - s*100), Arrival: t0.Add(time.Duration(s) * time.Second)})
	}
	if got := strings.Join(drain(q), " "); got != "s3 s2 s1 long" {
		t.Fatalf("pure shortest-first: %s, want s3 s2 s1 long", got)
	}
}

// TestPriorityTiers: lower priority values go first whatever their
// arrival; within a tier, arrival order. fcfs ignores priorities.
func TestPriorityTiers(t *testing.T) {
	push := func(q *Queue) {
		for i, p := range []int{0, 5, -1, 0, -1} {
			mustPush(t, q, Entry{ID: fmt.Sprintf("r%d(p%d)", i, p), Priority: p, Arrival: t0.Add(time.Duration(i) * time.Second)})
		}
	}
	q := newQueue(t, func(c *Config) { c.Policy = PolicyPriority })
	push(q)
	if got, want := strings.Join(drain(q), " "), "r2(p-1) r4(p-1) r0(p0) r3(p0) r1(p5)"; got != want {
		t.Fatalf("priority: %s, want %s", got, want)
	}
	q = newQueue(t, nil)
	push(q)
	if got, want := strings.Join(drain(q), " "), "r0(p0) r1(p5) r2(p-1) r3(p0) r4(p-1)"; got != want {
		t.Fatalf("fcfs: %s, want %s", got, want)
	}
}

// TestTenantInFlightCap: a tenant at its cap is passed over (and may not
// bypass the queue) until one of its requests is done.
func TestTenantInFlightCap(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.TenantInFlight = 2 })
	q.Begin("a")
	q.Begin("a")
	if q.MayBypass("a") || !q.MayBypass("b") || !q.AtCap("a") {
		t.Fatal("a at its cap of 2 may bypass, or b may not")
	}
	mustPush(t, q, Entry{ID: "a1", Tenant: "a", Arrival: t0})
	mustPush(t, q, Entry{ID: "b1", Tenant: "b", Arrival: t0.Add(time.Second)})
	if e, ok := q.Pop(); !ok || e.ID != "b1" {
		t.Fatalf("pop %q %v, want b1 (a is at its cap)", e.ID, ok)
	}
	if e, ok := q.Pop(); ok {
		t.Fatalf("pop %q while a is at its cap", e.ID)
	}
	q.Done("a")
	if e, ok := q.Pop(); !ok || e.ID != "a1" {
		t.Fatalf("pop %q %v after a's Done, want a1", e.ID, ok)
	}
	if q.InFlight("a") != 2 || q.InFlight("b") != 1 {
		t.Fatalf("in flight a %d b %d, want 2 and 1", q.InFlight("a"), q.InFlight("b"))
	}
}

// TestFullQueue: one tenant alone at a full queue gets ErrFull; with
// others waiting, a tenant over its share gets ErrOverShare, and one
// under it pushes out the last request of the tenant furthest over.
func TestFullQueue(t *testing.T) {
	q := newQueue(t, func(c *Config) { c.MaxLen = 4 })
	for i := range 4 {
		mustPush(t, q, Entry{ID: fmt.Sprint("a", i), Tenant: "a", Arrival: t0.Add(time.Duration(i) * time.Second)})
	}
	if _, _, err := q.Push(Entry{ID: "a4", Tenant: "a", Arrival: t0}); !errors.Is(err, ErrFull) {
		t.Fatalf("a alone at a full queue: %v, want ErrFull", err)
	}
	out, pushed, err := q.Push(Entry{ID: "b0", Tenant: "b", Arrival: t0.Add(5 * time.Second)})
	if err != nil || !pushed || out.ID != "a3" {
		t.Fatalf("b at a queue full of a: pushed out %q %v, %v; want a3", out.ID, pushed, err)
	}
	out, pushed, err = q.Push(Entry{ID: "b1", Tenant: "b", Arrival: t0.Add(6 * time.Second)})
	if err != nil || !pushed || out.ID != "a2" {
		t.Fatalf("b's second: pushed out %q %v, %v; want a2", out.ID, pushed, err)
	}
	// Now a 2, b 2: each at its share of 2.
	if _, _, err := q.Push(Entry{ID: "b2", Tenant: "b", Arrival: t0}); !errors.Is(err, ErrOverShare) {
		t.Fatalf("b over its share: %v, want ErrOverShare", err)
	}
	s := q.Stats()
	if s.Pushed != 6 || s.PushedOut != 2 || s.RefusedFull != 1 || s.RefusedShare != 1 || q.Len() != 4 {
		t.Fatalf("stats %+v, len %d", s, q.Len())
	}
}

// TestDeadlinesAndRemove: Expire takes out what is due, earliest first;
// Remove takes out one; neither leaves a tenant behind.
func TestDeadlinesAndRemove(t *testing.T) {
	q := newQueue(t, nil)
	mustPush(t, q, Entry{ID: "x", Tenant: "x", Arrival: t0, Deadline: t0.Add(3 * time.Second)})
	mustPush(t, q, Entry{ID: "y", Tenant: "y", Arrival: t0, Deadline: t0.Add(time.Second)})
	mustPush(t, q, Entry{ID: "z", Tenant: "z", Arrival: t0})
	if d, ok := q.NextDeadline(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("next deadline %v %v", d, ok)
	}
	if got := ids(q.Expire(t0.Add(999 * time.Millisecond))); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	if got := ids(q.Expire(t0.Add(5 * time.Second))); !slices.Equal(got, []string{"y", "x"}) {
		t.Fatalf("expired %v, want [y x]", got)
	}
	if _, ok := q.Remove("z"); !ok {
		t.Fatal("remove z")
	}
	if _, ok := q.Remove("z"); ok {
		t.Fatal("removed z twice")
	}
	if q.Len() != 0 || len(q.tenants) != 0 || len(q.View(10).Tenants) != 0 {
		t.Fatalf("left %d waiting, %d tenants", q.Len(), len(q.tenants))
	}
}

func TestRequeueKeepsPlace(t *testing.T) {
	q := newQueue(t, nil)
	for i := range 3 {
		mustPush(t, q, Entry{ID: fmt.Sprint("r", i), Arrival: t0.Add(time.Duration(i) * time.Second)})
	}
	e, _ := q.Pop()
	if !q.Requeue(e) || q.Requeue(e) {
		t.Fatal("requeue accepted twice or refused once")
	}
	if got := strings.Join(drain(q), " "); got != "r0 r1 r2" {
		t.Fatalf("after requeue: %s", got)
	}
	if q.InFlight("") != 0 {
		t.Fatalf("in flight %d after every Done", q.InFlight(""))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Policy = "lifo" },
		func(c *Config) { c.MaxLen = 0 },
		func(c *Config) { c.AgingTokensPerSecond = -1 },
		func(c *Config) { c.TenantInFlight = -1 },
		func(c *Config) { c.DefaultWeight = 0 },
		func(c *Config) { c.Weights = map[string]float64{"a": -2} },
		func(c *Config) { c.TTFTTarget = -time.Second },
		func(c *Config) { c.BurstCredit = -1 },
		func(c *Config) { c.BurstCredit = math.Inf(1) },
		func(c *Config) { c.StaggerGap = -time.Millisecond },
		func(c *Config) { c.StaggerMaxHold = -time.Millisecond },
	} {
		c := DefaultConfig()
		mod(&c)
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v, want ErrConfig", c, err)
		}
	}
	q := newQueue(t, nil)
	if _, _, err := q.Push(Entry{}); !errors.Is(err, ErrEntry) {
		t.Fatalf("empty id: %v", err)
	}
	mustPush(t, q, Entry{ID: "a"})
	if _, _, err := q.Push(Entry{ID: "a"}); !errors.Is(err, ErrEntry) {
		t.Fatalf("duplicate id: %v", err)
	}
}
