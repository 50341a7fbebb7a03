package admission

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// model is the naive reference: every waiting entry in one slice, the
// next one found by sorting a copy by the documented release order.
type model struct {
	cfg      Config
	waiting  []Entry
	seqs     map[string]uint64
	served   map[string]float64
	inflight map[string]int
	vtime    float64
	seq      uint64
	base     time.Time
	hasBase  bool
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg, seqs: map[string]uint64{}, served: map[string]float64{}, inflight: map[string]int{}}
}

func (m *model) weight(t string) float64 {
	if w, ok := m.cfg.Weights[t]; ok {
		return w
	}
	return m.cfg.DefaultWeight
}

func cost(e Entry) float64 {
	if e.Cost < 1 {
		return 1
	}
	return e.Cost
}

func (m *model) key(e Entry) float64 {
	if m.cfg.Policy == PolicyWSPT {
		return cost(e) + m.cfg.AgingTokensPerSecond*e.Arrival.Sub(m.base).Seconds()
	}
	return e.Arrival.Sub(m.base).Seconds()
}

func (m *model) tier(e Entry) int {
	if m.cfg.Policy == PolicyPriority {
		return e.Priority
	}
	return 0
}

func (m *model) waitingOf(t string) int {
	n := 0
	for _, e := range m.waiting {
		if e.Tenant == t {
			n++
		}
	}
	return n
}

// live: a tenant with something waiting or in flight keeps its served
// value; any other starts at the virtual time.
func (m *model) touch(t string) {
	if m.waitingOf(t) == 0 && m.inflight[t] == 0 {
		m.served[t] = m.vtime
	}
}

func (m *model) add(e Entry) {
	if !m.hasBase {
		m.base, m.hasBase = e.Arrival, true
	}
	m.touch(e.Tenant)
	if m.waitingOf(e.Tenant) == 0 {
		m.served[e.Tenant] = max(m.served[e.Tenant], m.vtime)
	}
	m.waiting = append(m.waiting, e)
}

func (m *model) drop(id string) (Entry, bool) {
	for i, e := range m.waiting {
		if e.ID == id {
			m.waiting = slices.Delete(m.waiting, i, i+1)
			return e, true
		}
	}
	return Entry{}, false
}

// order sorts a copy of what may be released: tier, then the tenant's
// served value, then the within-tier key, then push order.
func (m *model) order() []Entry {
	var c []Entry
	for _, e := range m.waiting {
		if m.cfg.TenantInFlight == 0 || m.inflight[e.Tenant] < m.cfg.TenantInFlight {
			c = append(c, e)
		}
	}
	// Only the tenant's best tier competes: an entry of a worse tier of
	// a tenant is behind that tenant's better ones anyway.
	slices.SortStableFunc(c, func(a, b Entry) int {
		switch {
		case m.tier(a) != m.tier(b):
			return m.tier(a) - m.tier(b)
		case m.served[a.Tenant] != m.served[b.Tenant]:
			if m.served[a.Tenant] < m.served[b.Tenant] {
				return -1
			}
			return 1
		case m.key(a) != m.key(b):
			if m.key(a) < m.key(b) {
				return -1
			}
			return 1
		}
		return int(m.seqs[a.ID]) - int(m.seqs[b.ID])
	})
	return c
}

func (m *model) pop() (Entry, bool) {
	c := m.order()
	if len(c) == 0 {
		return Entry{}, false
	}
	e := c[0]
	m.drop(e.ID)
	m.vtime = max(m.vtime, m.served[e.Tenant])
	m.served[e.Tenant] += cost(e) / m.weight(e.Tenant)
	m.inflight[e.Tenant]++
	return e, true
}

func (m *model) push(e Entry) (Entry, bool, error) {
	if slices.ContainsFunc(m.waiting, func(x Entry) bool { return x.ID == e.ID }) {
		return Entry{}, false, ErrEntry
	}
	var out Entry
	pushed := false
	if len(m.waiting) >= m.cfg.MaxLen {
		tenants := map[string]int{}
		for _, x := range m.waiting {
			tenants[x.Tenant]++
		}
		delete(tenants, e.Tenant)
		if len(tenants) == 0 {
			return Entry{}, false, ErrFull
		}
		sum := m.weight(e.Tenant)
		for t := range tenants {
			sum += m.weight(t)
		}
		share := func(t string) float64 { return float64(m.cfg.MaxLen) * m.weight(t) / sum }
		if float64(m.waitingOf(e.Tenant)+1) > share(e.Tenant) {
			return Entry{}, false, ErrOverShare
		}
		victim, worst, any := "", 0.0, false
		for t, n := range tenants {
			r := float64(n) / share(t)
			if !any || r > worst || r == worst && t < victim {
				victim, worst, any = t, r, true
			}
		}
		if worst <= 1 {
			return Entry{}, false, ErrFull
		}
		// The victim's last in release order: highest tier, then the
		// largest key, then the latest push.
		var last Entry
		found := false
		for _, x := range m.waiting {
			if x.Tenant != victim {
				continue
			}
			if !found || m.tier(x) > m.tier(last) || m.tier(x) == m.tier(last) &&
				(m.key(x) > m.key(last) || m.key(x) == m.key(last) && m.seqs[x.ID] > m.seqs[last.ID]) {
				last, found = x, true
			}
		}
		m.drop(last.ID)
		out, pushed = last, true
	}
	m.seq++
	m.seqs[e.ID] = m.seq
	m.add(e)
	return out, pushed, nil
}

// requeue: the tenant is live throughout (the entry was in flight), so
// it keeps its served value, refunded, and is only brought up to the
// virtual time if nothing else of it waits.
func (m *model) requeue(e Entry) {
	m.served[e.Tenant] = max(m.served[e.Tenant]-cost(e)/m.weight(e.Tenant), 0)
	if m.waitingOf(e.Tenant) == 0 {
		m.served[e.Tenant] = max(m.served[e.Tenant], m.vtime)
	}
	if m.inflight[e.Tenant] > 0 {
		m.inflight[e.Tenant]--
	}
	m.waiting = append(m.waiting, e)
}

func (m *model) done(t string) {
	if m.inflight[t] > 0 {
		m.inflight[t]--
	}
}

func (m *model) expire(now time.Time) []string {
	var exp []Entry
	for _, e := range m.waiting {
		if !e.Deadline.IsZero() && !e.Deadline.After(now) {
			exp = append(exp, e)
		}
	}
	slices.SortStableFunc(exp, func(a, b Entry) int {
		if c := a.Deadline.Compare(b.Deadline); c != 0 {
			return c
		}
		return int(m.seqs[a.ID]) - int(m.seqs[b.ID])
	})
	var ids []string
	for _, e := range exp {
		m.drop(e.ID)
		ids = append(ids, e.ID)
	}
	return ids
}

func ids(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func TestQueueMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := DefaultConfig()
		cfg.Policy = rapid.SampledFrom(Policies).Draw(t, "policy")
		cfg.MaxLen = rapid.IntRange(1, 12).Draw(t, "maxlen")
		cfg.TenantInFlight = rapid.IntRange(0, 3).Draw(t, "cap")
		cfg.AgingTokensPerSecond = float64(rapid.SampledFrom([]int{0, 100, 4096}).Draw(t, "aging"))
		cfg.Weights = map[string]float64{"b": 2, "c": 3}
		q, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(cfg)
		now := time.Unix(1000, 0)
		var released []Entry // popped and not done or requeued
		next := 0
		tenants := []string{"", "a", "b", "c"}
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				next++
				e := Entry{ID: fmt.Sprint("r", next), Tenant: rapid.SampledFrom(tenants).Draw(t, "tenant"),
					Priority: rapid.IntRange(-1, 2).Draw(t, "prio"), Cost: float64(rapid.IntRange(0, 5000).Draw(t, "cost")),
					Arrival: now}
				if rapid.Bool().Draw(t, "deadline") {
					e.Deadline = now.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "dl")) * time.Second)
				}
				o1, p1, err1 := q.Push(e)
				o2, p2, err2 := m.push(e)
				if !errors.Is(err1, err2) || (err1 == nil) != (err2 == nil) || p1 != p2 || o1.ID != o2.ID {
					var qs []string
					for _, it := range q.items {
						qs = append(qs, fmt.Sprintf("%s/%s/%v/%d", it.e.ID, it.e.Tenant, it.key, it.seq))
					}
					var ms []string
					for _, x := range m.waiting {
						ms = append(ms, fmt.Sprintf("%s/%s/%v/%d", x.ID, x.Tenant, m.key(x), m.seqs[x.ID]))
					}
					t.Fatalf("push %+v: queue (%v %v %v), model (%v %v %v)\nqueue %v\nmodel %v", e, o1.ID, p1, err1, o2.ID, p2, err2, qs, ms)
				}
			},
			"pop": func(t *rapid.T) {
				pk, pok := q.Peek()
				e1, ok1 := q.Pop()
				e2, ok2 := m.pop()
				if ok1 != ok2 || e1.ID != e2.ID || pok != ok1 || pk.ID != e1.ID {
					t.Fatalf("pop: queue %q %v (peek %q), model %q %v", e1.ID, ok1, pk.ID, e2.ID, ok2)
				}
				if ok1 {
					released = append(released, e1)
				}
			},
			"done": func(t *rapid.T) {
				if len(released) == 0 {
					tn := rapid.SampledFrom(tenants).Draw(t, "tenant")
					q.Begin(tn)
					m.touch(tn)
					m.inflight[tn]++
					return
				}
				i := rapid.IntRange(0, len(released)-1).Draw(t, "i")
				e := released[i]
				released = slices.Delete(released, i, i+1)
				if rapid.Bool().Draw(t, "requeue") {
					if !q.Requeue(e) {
						t.Fatalf("requeue %q refused", e.ID)
					}
					m.requeue(e)
					return
				}
				q.Done(e.Tenant)
				m.done(e.Tenant)
			},
			"remove": func(t *rapid.T) {
				id := fmt.Sprint("r", rapid.IntRange(0, next+1).Draw(t, "id"))
				_, ok1 := q.Remove(id)
				_, ok2 := m.drop(id)
				if ok1 != ok2 {
					t.Fatalf("remove %s: queue %v model %v", id, ok1, ok2)
				}
			},
			"tick": func(t *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 2000).Draw(t, "ms")) * time.Millisecond)
				got, want := ids(q.Expire(now)), m.expire(now)
				if !slices.Equal(got, want) {
					t.Fatalf("expire at %v: queue %v model %v", now, got, want)
				}
			},
			"": func(t *rapid.T) {
				if q.Len() != len(m.waiting) {
					t.Fatalf("len %d, model %d", q.Len(), len(m.waiting))
				}
				for _, tn := range tenants {
					if q.InFlight(tn) != m.inflight[tn] {
						t.Fatalf("tenant %q in flight %d, model %d", tn, q.InFlight(tn), m.inflight[tn])
					}
					atCap := cfg.TenantInFlight > 0 && m.inflight[tn] >= cfg.TenantInFlight
					if q.AtCap(tn) != atCap {
						t.Fatalf("tenant %q at cap %v, model %v", tn, q.AtCap(tn), atCap)
					}
				}
				if len(q.tenants) > len(m.waiting)+len(released)+20 {
					t.Fatalf("%d tenants kept for %d waiting", len(q.tenants), len(m.waiting))
				}
			},
		})
	})
}
