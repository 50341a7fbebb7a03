package admission

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"time"
)

// Entry is one waiting request.
type Entry struct {
	// ID identifies the request; unique among waiting entries.
	ID string
	// Tenant is who sent it (an API key's name, a header); "" is a tenant
	// like any other.
	Tenant string
	// Priority is its tier under PolicyPriority: lower values are released
	// first. Ignored by the other policies.
	Priority int
	// Cost is its predicted prefill in tokens: WSPT's size, and what its
	// tenant is charged by fair queueing. Below 1 counts as 1.
	Cost float64
	// Arrival is when it arrived (FCFS order, WSPT aging).
	Arrival time.Time
	// Deadline is when Expire removes it; zero never.
	Deadline time.Time

	seq uint64 // push order, kept through Pop and Requeue
}

func (e *Entry) cost() float64 {
	if !(e.Cost >= 1) || !finite(e.Cost) {
		return 1
	}
	return e.Cost
}

// item is an entry in the queue: its place in its tenant's tier heap and
// in the deadline heap.
type item struct {
	e    Entry
	key  float64 // within-tier order (ties: seq)
	seq  uint64  // push order; kept by Requeue
	tier int
	hi   int // index in the tier heap
	di   int // index in the deadline heap, -1 without a deadline
}

// before is the within-tier order.
func (a *item) before(b *item) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.seq < b.seq
}

type tierHeap []*item

func (h tierHeap) Len() int           { return len(h) }
func (h tierHeap) Less(i, j int) bool { return h[i].before(h[j]) }
func (h tierHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].hi = i; h[j].hi = j }
func (h *tierHeap) Push(x any)        { it := x.(*item); it.hi = len(*h); *h = append(*h, it) }
func (h *tierHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

type deadlineHeap []*item

func (h deadlineHeap) Len() int { return len(h) }
func (h deadlineHeap) Less(i, j int) bool {
	if !h[i].e.Deadline.Equal(h[j].e.Deadline) {
		return h[i].e.Deadline.Before(h[j].e.Deadline)
	}
	return h[i].seq < h[j].seq
}
func (h deadlineHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].di = i; h[j].di = j }
func (h *deadlineHeap) Push(x any)   { it := x.(*item); it.di = len(*h); *h = append(*h, it) }
func (h *deadlineHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.di = -1
	return it
}

// tenant is one tenant's fair-queueing state. It exists while the tenant
// has requests waiting or in flight.
type tenant struct {
	name     string
	weight   float64
	served   float64 // service received / weight (virtual time)
	inflight int
	waiting  int
	tiers    map[int]*tierHeap
}

// minTier returns the lowest tier with an entry waiting.
func (t *tenant) minTier() (int, *tierHeap) {
	best, bh := 0, (*tierHeap)(nil)
	for tier, h := range t.tiers {
		if h.Len() > 0 && (bh == nil || tier < best) {
			best, bh = tier, h
		}
	}
	return best, bh
}

// Stats counts what happened to entries.
type Stats struct {
	// Pushed counts entries accepted (Requeue not included).
	Pushed uint64
	// Released counts entries returned by Pop.
	Released uint64
	// Requeued counts entries put back by Requeue.
	Requeued uint64
	// Removed counts entries taken out by Remove.
	Removed uint64
	// Expired counts entries taken out by Expire.
	Expired uint64
	// PushedOut counts entries evicted by a push to a full queue.
	PushedOut uint64
	// RefusedFull and RefusedShare count pushes refused with ErrFull and
	// ErrOverShare.
	RefusedFull, RefusedShare uint64
}

// Queue is the admission queue. Not safe for concurrent use.
type Queue struct {
	cfg       Config
	tenants   map[string]*tenant
	items     map[string]*item
	deadlines deadlineHeap
	vtime     float64 // the last released entry's start tag
	seq       uint64
	base      time.Time // WSPT's time origin (the first push)
	hasBase   bool
	stats     Stats
	ends      map[string]time.Time // predicted prefill ends of released requests (stagger.go)
	// flight counts the tenants' requests in flight for TenantInFlight:
	// this queue's own (New) or shared with other queues (NewShared).
	flight *Ledger
}

// New returns an empty queue.
func New(cfg Config) (*Queue, error) { return NewShared(cfg, NewLedger()) }

// NewShared returns an empty queue whose tenant in-flight caps count the
// requests in flight in l, which other queues may share: a front door
// with one queue per model pool keeps each tenant's TenantInFlight one
// promise over all of them, while each queue orders and bounds only its
// own waiting requests. Queues sharing l must be serialised together.
func NewShared(cfg Config, l *Ledger) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil ledger", ErrConfig)
	}
	return &Queue{cfg: cfg, tenants: map[string]*tenant{}, items: map[string]*item{}, flight: l}, nil
}

// Ledger counts each tenant's requests in flight across the queues that
// share it (NewShared): what TenantInFlight caps. A queue's own counts
// (InFlight, the fair order's and staggered release's load, View) stay
// the queue's. The zero value is not usable; NewLedger makes one. Not
// safe for concurrent use.
type Ledger struct{ n map[string]int }

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{n: map[string]int{}} }

// InFlight returns tenant's requests in flight in every queue sharing l.
func (l *Ledger) InFlight(tenant string) int { return l.n[tenant] }

func (l *Ledger) add(tenant string, d int) {
	if n := l.n[tenant] + d; n > 0 {
		l.n[tenant] = n
	} else {
		delete(l.n, tenant) // bounded by the tenants in flight
	}
}

// Idle reports whether the queue holds nothing: no request waiting, no
// tenant in flight, no predicted prefill end (stagger.go). An idle queue
// can be dropped and made afresh without changing what it would do but
// for its counters (Stats).
func (q *Queue) Idle() bool { return len(q.items) == 0 && len(q.tenants) == 0 && len(q.ends) == 0 }

// Config returns the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

// Len returns the number of entries waiting.
func (q *Queue) Len() int { return len(q.items) }

// Stats returns the counters.
func (q *Queue) Stats() Stats { return q.stats }

func (q *Queue) weight(name string) float64 {
	if w, ok := q.cfg.Weights[name]; ok {
		return w
	}
	return q.cfg.DefaultWeight
}

func (q *Queue) tenant(name string) *tenant {
	t := q.tenants[name]
	if t == nil {
		w := q.weight(name)
		t = &tenant{name: name, weight: w, served: q.vtime - q.cfg.BurstCredit/w, tiers: map[int]*tierHeap{}}
		q.tenants[name] = t
	}
	return t
}

// forget drops a tenant with nothing waiting or in flight, so that the
// table is bounded by the requests the caller holds.
func (q *Queue) forget(t *tenant) {
	if t.waiting == 0 && t.inflight <= 0 {
		delete(q.tenants, t.name)
	}
}

// AtCap reports whether tenant has TenantInFlight requests in flight, in
// every queue sharing this one's ledger (NewShared).
func (q *Queue) AtCap(tenant string) bool {
	return q.cfg.TenantInFlight > 0 && q.flight.n[tenant] >= q.cfg.TenantInFlight
}

// InFlight returns tenant's requests in flight counted by this queue
// (released by its Pop or counted by its Begin); Ledger.InFlight has
// those of every queue sharing its ledger.
func (q *Queue) InFlight(tenant string) int {
	if t := q.tenants[tenant]; t != nil {
		return t.inflight
	}
	return 0
}

// MayBypass reports whether a request of tenant may go straight to the
// router without waiting: nobody is waiting (whoever is waiting goes
// first) and the tenant is below its in-flight cap.
func (q *Queue) MayBypass(tenant string) bool {
	return len(q.items) == 0 && !q.AtCap(tenant)
}

// Begin counts a request of tenant that did not wait as in flight (Pop
// counts those it releases); Done ends either.
func (q *Queue) Begin(tenant string) {
	q.tenant(tenant).inflight++
	q.flight.add(tenant, 1)
}

// Done ends one of tenant's requests in flight (released by Pop or
// counted by Begin). Extra calls are ignored.
func (q *Queue) Done(tenant string) {
	t := q.tenants[tenant]
	if t == nil || t.inflight == 0 {
		return
	}
	t.inflight--
	q.flight.add(tenant, -1)
	q.forget(t)
}

// share is tenant t's weighted share of MaxLen among the tenants waiting
// (t counted as waiting).
func (q *Queue) share(t *tenant) float64 {
	sum := t.weight
	for _, o := range q.tenants {
		if o != t && o.waiting > 0 {
			sum += o.weight
		}
	}
	return float64(q.cfg.MaxLen) * t.weight / sum
}

// Push adds e. At a full queue it refuses e (ErrOverShare when e's tenant
// holds its share, ErrFull when no tenant is over its share) or pushes
// out the request its tenant would release last from the tenant furthest
// over its share, and returns that one (pushed true). Errors wrap
// ErrEntry, ErrFull or ErrOverShare.
func (q *Queue) Push(e Entry) (out Entry, pushed bool, err error) {
	if e.ID == "" {
		return out, false, fmt.Errorf("%w: empty id", ErrEntry)
	}
	if _, dup := q.items[e.ID]; dup {
		return out, false, fmt.Errorf("%w: %q is already waiting", ErrEntry, e.ID)
	}
	if len(q.items) >= q.cfg.MaxLen {
		if out, err = q.pushOut(e.Tenant); err != nil {
			return out, false, err
		}
		pushed = true
	}
	q.seq++
	e.seq = q.seq
	q.insert(&item{e: e, seq: q.seq, di: -1})
	q.stats.Pushed++
	return out, pushed, nil
}

// pushOut makes room for a request of tenant name at a full queue.
func (q *Queue) pushOut(name string) (Entry, error) {
	t := q.tenants[name]
	if t == nil {
		t = &tenant{name: name, weight: q.weight(name)} // not kept
	}
	others := false
	for _, o := range q.tenants {
		others = others || (o != t && o.waiting > 0)
	}
	if !others {
		q.stats.RefusedFull++
		return Entry{}, fmt.Errorf("%w: %d waiting", ErrFull, len(q.items))
	}
	if float64(t.waiting+1) > q.share(t) {
		q.stats.RefusedShare++
		return Entry{}, fmt.Errorf("%w: tenant %q has %d of %d waiting", ErrOverShare, name, t.waiting, q.cfg.MaxLen)
	}
	// The victim: the tenant with the highest waiting / share, ties by
	// name (deterministic).
	var victim *tenant
	var worst float64
	for _, o := range q.tenants {
		if o == t || o.waiting == 0 {
			continue
		}
		r := float64(o.waiting) / q.shareWith(o, t)
		if victim == nil || r > worst || (r == worst && o.name < victim.name) {
			victim, worst = o, r
		}
	}
	if victim == nil || worst <= 1 {
		q.stats.RefusedFull++
		return Entry{}, fmt.Errorf("%w: %d waiting", ErrFull, len(q.items))
	}
	it := victim.last()
	q.remove(it)
	q.stats.PushedOut++
	return it.e, nil
}

// shareWith is o's share with t counted as waiting.
func (q *Queue) shareWith(o, t *tenant) float64 {
	sum := o.weight
	if t.waiting == 0 {
		sum += t.weight
	}
	for _, x := range q.tenants {
		if x != o && x.waiting > 0 {
			sum += x.weight
		}
	}
	return float64(q.cfg.MaxLen) * o.weight / sum
}

// last is the entry the tenant would release last: its highest tier's
// latest in the within-tier order.
func (t *tenant) last() *item {
	var worst *item
	for _, h := range t.tiers {
		for _, it := range *h {
			if worst == nil || it.tier > worst.tier || (it.tier == worst.tier && worst.before(it)) {
				worst = it
			}
		}
	}
	return worst
}

func (q *Queue) insert(it *item) {
	e := &it.e
	if !q.hasBase {
		q.base, q.hasBase = e.Arrival, true
	}
	switch q.cfg.Policy {
	case PolicyWSPT:
		it.key = e.cost() + q.cfg.AgingTokensPerSecond*e.Arrival.Sub(q.base).Seconds()
	default:
		it.key = e.Arrival.Sub(q.base).Seconds()
	}
	if q.cfg.Policy == PolicyPriority {
		it.tier = e.Priority
	}
	t := q.tenant(e.Tenant)
	if t.waiting == 0 {
		// Back from idle: no more credit banked while away than
		// BurstCredit.
		t.served = max(t.served, q.vtime-q.cfg.BurstCredit/t.weight)
	}
	h := t.tiers[it.tier]
	if h == nil {
		h = &tierHeap{}
		t.tiers[it.tier] = h
	}
	heap.Push(h, it)
	t.waiting++
	if !e.Deadline.IsZero() {
		heap.Push(&q.deadlines, it)
	}
	q.items[e.ID] = it
}

// remove takes it out of every structure.
func (q *Queue) remove(it *item) {
	t := q.tenants[it.e.Tenant]
	h := t.tiers[it.tier]
	heap.Remove(h, it.hi)
	if h.Len() == 0 {
		delete(t.tiers, it.tier)
	}
	t.waiting--
	if it.di >= 0 {
		heap.Remove(&q.deadlines, it.di)
	}
	delete(q.items, it.e.ID)
	q.forget(t)
}

// Peek returns the entry Pop would release, without releasing it.
func (q *Queue) Peek() (Entry, bool) {
	if _, it := q.next(); it != nil {
		return it.e, true
	}
	return Entry{}, false
}

// next finds the entry to release and its tenant.
func (q *Queue) next() (*tenant, *item) { return q.nextAmong(nil) }

// nextAmong finds the entry to release among the tenants skip does not
// rule out (nil: every tenant).
func (q *Queue) nextAmong(skip func(*tenant) bool) (*tenant, *item) {
	var bt *tenant
	var bi *item
	for _, t := range q.tenants {
		if t.waiting == 0 || q.AtCap(t.name) || (skip != nil && skip(t)) {
			continue
		}
		_, h := t.minTier()
		head := (*h)[0]
		if bi == nil || head.tier < bi.tier ||
			(head.tier == bi.tier && (t.served < bt.served || (t.served == bt.served && head.before(bi)))) {
			bt, bi = t, head
		}
	}
	return bt, bi
}

// Pop releases the next entry in policy order among the tenants below
// their in-flight cap, counts it in flight for its tenant and charges
// the tenant its cost. false when nothing may be released.
func (q *Queue) Pop() (Entry, bool) { return q.release(q.next()) }

// release pops it, t's entry.
func (q *Queue) release(t *tenant, it *item) (Entry, bool) {
	if it == nil {
		return Entry{}, false
	}
	t.inflight++ // first: remove must not forget the tenant
	q.flight.add(t.name, 1)
	q.remove(it)
	q.vtime = max(q.vtime, t.served)
	t.served += it.e.cost() / t.weight
	q.stats.Released++
	return it.e, true
}

// Requeue puts back an entry Pop released that could not be served after
// all (the router found every worker busy again), undoing Pop's charge
// and in-flight count: it keeps its place. It is refused (false) when
// its id is waiting again, and it may exceed MaxLen by the entries
// released at once.
func (q *Queue) Requeue(e Entry) bool {
	if _, dup := q.items[e.ID]; dup || e.ID == "" {
		return false
	}
	t := q.tenant(e.Tenant)
	if t.inflight > 0 {
		t.inflight--
		q.flight.add(t.name, -1)
	}
	t.served = max(t.served-e.cost()/t.weight, 0)
	if e.seq == 0 {
		q.seq++
		e.seq = q.seq
	}
	q.insert(&item{e: e, seq: e.seq, di: -1})
	q.stats.Requeued++
	return true
}

// Remove takes out a waiting entry (its client left); false when id is
// not waiting.
func (q *Queue) Remove(id string) (Entry, bool) {
	it, ok := q.items[id]
	if !ok {
		return Entry{}, false
	}
	q.remove(it)
	q.stats.Removed++
	return it.e, true
}

// Expire takes out every entry whose deadline is not after now, earliest
// deadline first.
func (q *Queue) Expire(now time.Time) []Entry {
	var out []Entry
	for len(q.deadlines) > 0 && !q.deadlines[0].e.Deadline.After(now) {
		it := q.deadlines[0]
		q.remove(it)
		q.stats.Expired++
		out = append(out, it.e)
	}
	return out
}

// NextDeadline returns the earliest deadline of a waiting entry.
func (q *Queue) NextDeadline() (time.Time, bool) {
	if len(q.deadlines) == 0 {
		return time.Time{}, false
	}
	return q.deadlines[0].e.Deadline, true
}

// TenantView is one tenant's line in a View.
type TenantView struct {
	// Tenant is the tenant's name.
	Tenant string `json:"tenant"`
	// Waiting and InFlight are its requests waiting and in flight.
	Waiting  int `json:"waiting"`
	InFlight int `json:"in_flight"`
	// Weight is its fair-queueing weight.
	Weight float64 `json:"weight"`
}

// View is the queue's state for a status page.
type View struct {
	// Waiting is the number of entries waiting.
	Waiting int `json:"waiting"`
	// OldestArrival is the earliest arrival among them (zero when none).
	OldestArrival time.Time `json:"oldest_arrival"`
	// Tenants are the tenants with requests waiting or in flight, most
	// waiting first, at most limit of them.
	Tenants []TenantView `json:"tenants"`
}

// View returns the queue's state with at most limit tenants.
func (q *Queue) View(limit int) View {
	v := View{Waiting: len(q.items)}
	for _, it := range q.items {
		if v.OldestArrival.IsZero() || it.e.Arrival.Before(v.OldestArrival) {
			v.OldestArrival = it.e.Arrival
		}
	}
	for _, t := range q.tenants {
		v.Tenants = append(v.Tenants, TenantView{Tenant: t.name, Waiting: t.waiting, InFlight: t.inflight, Weight: t.weight})
	}
	v.order(limit)
	return v
}

// order sorts v's tenants (most waiting, then most in flight, then by
// name) and keeps at most limit.
func (v *View) order(limit int) {
	slices.SortFunc(v.Tenants, func(a, b TenantView) int {
		if c := cmp.Compare(b.Waiting, a.Waiting); c != 0 {
			return c
		}
		if c := cmp.Compare(b.InFlight, a.InFlight); c != 0 {
			return c
		}
		return cmp.Compare(a.Tenant, b.Tenant)
	})
	if len(v.Tenants) > max(limit, 0) {
		v.Tenants = v.Tenants[:max(limit, 0)]
	}
}

// MergeViews is the state of several queues (each View taken with no
// limit below its tenants) as one, with at most limit tenants: the
// waiting requests summed, the oldest arrival, and each tenant's waiting
// and in-flight requests summed over the queues (its weight is the
// configuration's, the same in every queue made from one Config). One
// view merges into itself, so one queue's View(limit) and
// MergeViews(limit, its View with no limit) agree.
func MergeViews(limit int, views ...View) View {
	var v View
	at := map[string]int{}
	for _, x := range views {
		v.Waiting += x.Waiting
		if !x.OldestArrival.IsZero() && (v.OldestArrival.IsZero() || x.OldestArrival.Before(v.OldestArrival)) {
			v.OldestArrival = x.OldestArrival
		}
		for _, t := range x.Tenants {
			if i, ok := at[t.Tenant]; ok {
				v.Tenants[i].Waiting += t.Waiting
				v.Tenants[i].InFlight += t.InFlight
				continue
			}
			at[t.Tenant] = len(v.Tenants)
			v.Tenants = append(v.Tenants, t)
		}
	}
	v.order(limit)
	return v
}
