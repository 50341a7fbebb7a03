package frontend

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueConfig configures the admission queue: while every worker of a
// request's model pool that is not DOWN is over one of Thresholds (in a
// disaggregated pool, every prefill-role worker or every decode-side
// worker: router.Router.HopsSaturated; for a LoRA adapter's request,
// every such worker with the adapter loaded), the request waits instead
// of being routed (or refused), and waiting requests are released in the
// queue's order as their capacity frees, each routed afresh when
// released. Each model pool, and each LoRA adapter of a pool, has a
// queue of its own (see gate); a tenant's in-flight cap spans them.
type QueueConfig struct {
	// Thresholds say when a worker is saturated (the scheduler's busy
	// thresholds, a second set): pending prefill tokens, as an absolute
	// count or a fraction of the worker's max batched tokens, and KV
	// blocks held as a fraction of its capacity. None set and no tenant
	// in-flight cap turns the queue off. Default none.
	Thresholds scheduler.Thresholds
	// Admission orders the waiting requests: policy, length, WSPT aging,
	// tenant weights and the tenant in-flight cap; and its TTFT target
	// refuses a released request that can no longer meet it (503
	// queue_late). Each model pool's and each adapter's queue has this
	// configuration (MaxLen bounds each); the tenant in-flight cap counts
	// a tenant's requests of every model and adapter.
	Admission admission.Config
	// Timeout is each request's longest wait; past it the client gets
	// 503 with Retry-After (429 when its tenant is at its in-flight cap).
	// Default 30 s.
	Timeout time.Duration
	// Recheck is how often waiting requests look for capacity that freed
	// without this front door seeing it (another router replica's
	// requests ending, bookings expiring). Default 250 ms.
	Recheck time.Duration
	// TenantHeader names the request header that says the tenant when
	// no API keys are configured (with keys, the key is the tenant).
	// Default "X-Tenant-ID".
	TenantHeader string
	// PriorityHeader names the request header carrying the priority when
	// the body has no "priority" field (lower is served first, as vLLM's
	// field). Default "X-Priority".
	PriorityHeader string
}

// DefaultQueueConfig returns the defaults documented on QueueConfig.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{Admission: admission.DefaultConfig(), Timeout: 30 * time.Second, Recheck: 250 * time.Millisecond,
		TenantHeader: "X-Tenant-ID", PriorityHeader: "X-Priority"}
}

// on says whether requests go through the queue at all.
func (c QueueConfig) on() bool { return c.Thresholds.On() || c.Admission.TenantInFlight > 0 }

func (c QueueConfig) validate() error {
	if err := c.Thresholds.Validate(); err != nil {
		return fmt.Errorf("%w: queue thresholds: %w", ErrConfig, err)
	}
	if err := c.Admission.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	switch {
	case c.Timeout <= 0:
		return fmt.Errorf("%w: queue timeout %v must be positive", ErrConfig, c.Timeout)
	case c.Recheck <= 0:
		return fmt.Errorf("%w: queue recheck %v must be positive", ErrConfig, c.Recheck)
	}
	return nil
}

// The error type and codes of queue refusals.
const (
	typeRateLimit    = "rate_limit_error"
	codeOverShare    = "tenant_over_share"
	codeQueueTimeout = "queue_timeout"
	codeQueueLate    = "queue_late"
)

// Queue refusals, answered by writeQueueError.
var (
	errQueueTimeout = errors.New("waited the queue timeout for a worker below its thresholds")
	errQueueLate    = errors.New("waited so long for a worker below its thresholds that the first token can no longer come within the TTFT target")
	errQueueFull    = errors.New("the admission queue is full")
	errOverShare    = errors.New("this tenant is over its share of the router")
)

// gate is the edge of the admission queue: the waiting requests'
// goroutines park here until the queue releases them.
//
// The queue is per model pool. A fleet of models (router.Pools) saturates
// one pool at a time: judged fleet-wide, model A's requests would bypass
// the queue onto A's saturated workers while model B idles, and a request
// of A released because B's capacity freed would land on a saturated A
// worker. So each pool (a request's router.Request.Model, "" the default
// model) has its own admission.Queue, judged by its own saturation
// (Router.PoolSaturated): a request bypasses when its pool's queue is
// empty and its pool has room, and kick releases from a pool only while
// that pool has room. The queues share one admission.Ledger, so a
// tenant's in-flight cap (its promise) counts its requests of every
// model; ordering, fair-queueing credit, MaxLen, staggered release and
// the status view's counts are each pool's. Releases stay one at a time
// (releasing), taken round-robin over the pools with requests waiting
// from the one after the last released, so a busy model cannot starve
// another. A single-model fleet without adapters has the one queue q and
// behaves as the one fleet-wide queue did.
//
// A LoRA adapter's request is routed only to the workers with the
// adapter loaded (Frontend.adapterWorkers), so judged by its base
// model's whole pool it would bypass the queue (or be released) onto its
// saturated workers while other workers of the pool idle, and capacity
// freeing on its workers would release nothing while the rest of the
// pool stays saturated. So the queues are keyed by queueKey, (pool,
// adapter): each adapter of a pool that has requests waiting or in
// flight has a queue of its own, judged by the saturation of the workers
// that have it loaded now (Router.WorkersSaturated, per hop as
// PoolSaturated), while the pool's own queue ("" adapter) keeps the base
// model's requests, judged by the whole pool. The adapters are those
// the workers list (Models.Adapter; loraOf ignores a name no worker
// has), so their queues are bounded by the fleet, as the pools' are. An
// adapter no worker has loaded now (its requests then go to any worker
// of the pool) is judged by the whole pool, as before. Adapter queues
// take their turns in the same round-robin as the pools' (keys sorted by
// pool, then adapter) and share the ledger; the status view lists each
// queue with requests waiting, an adapter's as its model and adapter.
//
// A disaggregated request (forwardPD) passes the same gate once, before
// its first prefill hop is chosen (admitPD), and its first attempt's
// bookings settle its turn as routeFirst's do (firstBooked). Its pool
// has room when some prefill-role worker and some decode-side worker
// (decode or both role) are below the thresholds (Router.PoolSaturated
// judges per hop: router.Router.HopsSaturated), since it takes a hop on
// each.
type gate struct {
	cfg    QueueConfig
	router Router
	clock  func() time.Time
	m      *queueMetrics

	mu sync.Mutex
	// q is the default model's queue (the only one of a single-model
	// fleet without adapters); more are the other pools' and the
	// adapters' queues, made on a key's first request and dropped once
	// idle (admission.Queue.Idle), so they are bounded by the models and
	// adapters with requests waiting or in flight. names are the keys
	// with a queue, sorted (queueKey.compare: the default model's pool
	// queue first), and last the key released from last (round-robin).
	// All share ledger.
	q      *admission.Queue
	more   map[queueKey]*admission.Queue
	names  []queueKey
	last   queueKey
	ledger *admission.Ledger
	// adapterWorkers are the workers with a LoRA adapter loaded now
	// (Frontend.adapterWorkers; nil: every worker of its pool); an
	// adapter's queue is judged by them. Nil in a gate without models.
	adapterWorkers func(adapter string) []kvevent.WorkerID
	waiters        map[string]chan struct{} // closed (buffered send) on release
	lastProbe      time.Time
	// releasing is 1 while a released request has not booked yet: the
	// next is released only once it has (a request ending meanwhile must
	// not release a second one against load that is about to be booked).
	releasing int
	// With staggered release (admission.Config.StaggerGap): the waiting
	// requests, to predict a held one's prefill, and the timer that
	// looks again when a hold is over (due then).
	planned map[string]router.Request
	wake    *time.Timer
	due     time.Time
	// lastHeld is the last request a hold delayed, to count each once.
	lastHeld string
}

func newGate(cfg QueueConfig, r Router, clock func() time.Time, reg *prometheus.Registry, keyTenants []string) (*gate, error) {
	ledger := admission.NewLedger()
	q, err := admission.NewShared(cfg.Admission, ledger)
	if err != nil {
		return nil, err
	}
	g := &gate{cfg: cfg, router: r, clock: clock, q: q, more: map[queueKey]*admission.Queue{}, names: []queueKey{{}}, ledger: ledger,
		waiters: map[string]chan struct{}{}, planned: map[string]router.Request{}}
	g.m = newQueueMetrics(reg, g, keyTenants)
	return g, nil
}

// queueKey names one of the gate's queues: a model pool's (adapter "",
// pool "" the default model) or a LoRA adapter's of that pool.
type queueKey struct {
	pool, adapter string
}

// compare orders keys by pool, then adapter (a pool's own queue first).
func (k queueKey) compare(o queueKey) int {
	return cmp.Or(strings.Compare(k.pool, o.pool), strings.Compare(k.adapter, o.adapter))
}

// keyOf is the key of the queue ex's request req waits in: its pool and
// its adapter (ex.lora: an adapter some worker lists, never a client's
// arbitrary name).
func keyOf(ex *exchange, req router.Request) queueKey {
	return queueKey{pool: req.Model, adapter: ex.lora}
}

// saturated reports whether k's queue must hold its requests: its pool
// has no room (Router.PoolSaturated), or for an adapter's queue the
// workers with the adapter loaded have none (Router.WorkersSaturated; the
// whole pool when no worker has it loaded now, where its requests then
// go).
func (g *gate) saturated(k queueKey) bool {
	if k.adapter != "" && g.adapterWorkers != nil {
		return g.router.WorkersSaturated(k.pool, g.cfg.Thresholds, g.adapterWorkers(k.adapter))
	}
	return g.router.PoolSaturated(k.pool, g.cfg.Thresholds)
}

// queue returns k's queue, making it when there is none. Called with
// g.mu held.
func (g *gate) queue(k queueKey) *admission.Queue {
	if q := g.lookup(k); q != nil {
		return q
	}
	q, err := admission.NewShared(g.cfg.Admission, g.ledger)
	if err != nil {
		// Unreachable: the same configuration made g.q. Never panic in
		// a serving goroutine; metering by the default pool's queue is
		// the least surprising fallback.
		return g.q
	}
	g.more[k] = q
	i, _ := slices.BinarySearchFunc(g.names, k, queueKey.compare)
	g.names = slices.Insert(g.names, i, k)
	return q
}

// lookup returns k's queue, nil when there is none. Called with g.mu
// held.
func (g *gate) lookup(k queueKey) *admission.Queue {
	if k == (queueKey{}) {
		return g.q
	}
	return g.more[k]
}

// tidy drops k's queue when it is idle (the default model's stays).
// Called with g.mu held.
func (g *gate) tidy(k queueKey) {
	q := g.more[k]
	if k == (queueKey{}) || q == nil || !q.Idle() {
		return
	}
	delete(g.more, k)
	if i, ok := slices.BinarySearchFunc(g.names, k, queueKey.compare); ok {
		g.names = slices.Delete(g.names, i, i+1)
	}
}

// waiting is the requests waiting in every queue. Called with g.mu
// held.
func (g *gate) waiting() int {
	n := g.q.Len()
	for _, q := range g.more {
		n += q.Len()
	}
	return n
}

// tenantOf says who sent r: with API keys configured, the key (as
// "key-" and 12 hex digits of its SHA-256, so that the key itself never
// shows on a page or a metric); otherwise TenantHeader's value (at most
// 64 bytes), or "".
func (f *Frontend) tenantOf(r *http.Request) string {
	if len(f.cfg.APIKeys) > 0 || len(f.cfg.AdminKeys) > 0 {
		if key, ok := bearer(r); ok {
			return keyTenant(key)
		}
		return ""
	}
	v := r.Header.Get(f.cfg.Queue.TenantHeader)
	if len(v) > 64 {
		v = v[:64]
	}
	return v
}

// keyTenant is an API key's tenant name.
func keyTenant(key string) string {
	h := sha256.Sum256([]byte(key))
	return "key-" + hex.EncodeToString(h[:6])
}

// priorityOf is the body's "priority", else PriorityHeader's integer
// value, else 0.
func (f *Frontend) priorityOf(r *http.Request, fields *requestFields) int {
	if fields.Priority != nil {
		return *fields.Priority
	}
	if v, err := strconv.Atoi(r.Header.Get(f.cfg.Queue.PriorityHeader)); err == nil {
		return v
	}
	return 0
}

// admitted is an exchange's place in the gate, set once it is counted in
// flight for its tenant.
type admitted struct {
	tenant   string
	priority int
	counted  bool
	released bool      // released by the queue, not yet settled
	arrival  time.Time // when it joined the queue (released requests)
	// key is the queue that counts it (its router.Request.Model, ""
	// the default model, and its LoRA adapter: keyOf).
	key queueKey
}

// routeFirst is forward's first routing: through the admission queue
// when it is on, else straight to the router.
func (f *Frontend) routeFirst(r *http.Request, ex *exchange, req router.Request) (router.Decision, error) {
	g := f.gate
	if g == nil {
		d, err := f.routeSession(ex, req)
		if err == nil {
			f.bindSession(ex, d)
		}
		return d, err
	}
	if err := g.wait(r.Context(), ex, req); err != nil {
		return router.Decision{}, err
	}
	if ex.adm.released && g.staggering(ex.adm.key) {
		// A hold may have left a worker idle for this one: only the
		// workers below the thresholds take it (see admission's
		// stagger.go), not a saturated one holding its cached prefix
		// (every worker when none is below them any more).
		if allowed := g.unsaturated(req.Model, req.AllowedWorkers); len(allowed) > 0 {
			req.AllowedWorkers = allowed
		}
	}
	d, err := f.routeSession(ex, req)
	if err == nil {
		g.started(ex.adm.key, req, d)
	}
	if err == nil && g.late(ex, req, d) {
		// Too late to meet the TTFT target there: give the capacity to
		// the next one (and leave the session's binding as it was).
		f.free(req.ID)
		g.finished(ex.adm.key, req.ID)
		err = errQueueLate
	}
	if err == nil {
		f.bindSession(ex, d)
	}
	// Booked (or refused): capacity may remain for the next one.
	g.settle(ex)
	return d, err
}

// late reports whether a request the queue released, routed by d, can no
// longer meet the TTFT target (admission.Queue.Late) on d's worker, with
// the least its prefill can take there (admission.LeastPrefill) from
// that worker's time model.
func (g *gate) late(ex *exchange, req router.Request, d router.Decision) bool {
	if !ex.adm.released || g.cfg.Admission.TTFTTarget == 0 || d.Chosen < 0 || d.Chosen >= len(d.Candidates) {
		return false
	}
	pred := g.prefillOn(req, d) // a worker gone since it was chosen: judged by the prior
	g.mu.Lock()
	late := g.q.Late(admission.Entry{Arrival: ex.adm.arrival}, g.clock(), pred) // Late reads only the configuration, every pool's
	g.mu.Unlock()
	if late {
		g.m.count(ex.adm.tenant, "late")
	}
	return late
}

// settle ends a released request's turn: the next may be released.
func (g *gate) settle(ex *exchange) {
	if !ex.adm.released {
		return
	}
	ex.adm.released = false
	g.mu.Lock()
	g.releasing = 0
	g.mu.Unlock()
	g.kick()
}

// wait returns once ex may be routed: at once when nobody waits in its
// queue (keyOf: its model pool's, or its adapter's), its tenant is below
// its cap and some worker of the pool (of those with the adapter loaded)
// is below the thresholds; otherwise when its queue releases it. It
// counts ex in flight for its tenant (done ends that). Errors:
// errQueueTimeout, errQueueFull, errOverShare, or the client's context
// error.
func (g *gate) wait(ctx context.Context, ex *exchange, req router.Request) error {
	tenant, key := ex.adm.tenant, keyOf(ex, req)
	ex.adm.key = key
	g.mu.Lock()
	if q := g.queue(key); q.MayBypass(tenant) && !g.saturated(key) {
		q.Begin(tenant)
		ex.adm.counted = true
		g.mu.Unlock()
		g.m.count(tenant, "bypassed")
		return nil
	}
	g.mu.Unlock()
	cost := g.predictedPrefill(req) // hashing and an index query: outside the lock
	now := g.clock()
	e := admission.Entry{ID: req.ID, Tenant: tenant, Priority: ex.adm.priority, Cost: cost,
		Arrival: now, Deadline: now.Add(g.cfg.Timeout)}
	g.mu.Lock()
	q := g.queue(key)
	out, pushed, err := q.Push(e)
	if err != nil {
		atCap := q.AtCap(tenant)
		g.tidy(key)
		g.mu.Unlock()
		switch {
		case errors.Is(err, admission.ErrOverShare) || atCap:
			g.m.count(tenant, "over_share")
			return errOverShare
		default:
			g.m.count(tenant, "full")
			return errQueueFull
		}
	}
	ch := make(chan struct{}, 1)
	g.waiters[e.ID] = ch
	if q.Staggers() {
		g.planned[e.ID] = req
	}
	if pushed {
		delete(g.planned, out.ID)
		// The pushed-out request's waiter answers 429 (its channel stays
		// open: it sees its entry gone and no release).
		if och, ok := g.waiters[out.ID]; ok {
			delete(g.waiters, out.ID)
			close(och)
		}
	}
	g.mu.Unlock()
	g.m.count(tenant, "queued")
	// A request may have ended between the saturation check and the
	// push: look again once.
	g.kick()
	return g.park(ctx, ex, key, e, ch)
}

// park waits for ex's release from k's queue, its deadline or its
// client's departure.
func (g *gate) park(ctx context.Context, ex *exchange, k queueKey, e admission.Entry, ch chan struct{}) error {
	timer := time.NewTimer(g.cfg.Timeout)
	defer timer.Stop()
	tick := time.NewTicker(g.cfg.Recheck)
	defer tick.Stop()
	start := g.clock()
	for {
		select {
		case _, open := <-ch:
			if !open {
				g.m.done(e.Tenant, "pushed_out", g.clock().Sub(start))
				return errOverShare
			}
			ex.adm.counted, ex.adm.released, ex.adm.arrival = true, true, e.Arrival
			g.m.done(e.Tenant, "released", g.clock().Sub(start))
			return nil
		case <-tick.C:
			g.probe()
		case <-timer.C:
			atCap := g.leave(k, e, ch)
			g.m.done(e.Tenant, "timeout", g.clock().Sub(start))
			if atCap {
				return errOverShare
			}
			return errQueueTimeout
		case <-ctx.Done():
			g.leave(k, e, ch)
			g.m.done(e.Tenant, "disconnected", g.clock().Sub(start))
			return ctx.Err()
		}
	}
}

// leave takes a waiting entry out of k's queue; one released in the same
// instant passes its release on to the next. It returns whether the
// tenant is at its in-flight cap.
func (g *gate) leave(k queueKey, e admission.Entry, ch chan struct{}) bool {
	g.mu.Lock()
	delete(g.waiters, e.ID)
	delete(g.planned, e.ID)
	q := g.queue(k) // there while e waits or is counted in flight
	_, waiting := q.Remove(e.ID)
	released := false
	if !waiting {
		select {
		case _, open := <-ch:
			released = open
		default:
		}
	}
	if released {
		q.Done(e.Tenant)
		g.releasing = 0
	}
	atCap := q.AtCap(e.Tenant)
	g.tidy(k)
	g.mu.Unlock()
	if released {
		g.kick()
	}
	return atCap
}

// kick releases the next waiting request of a queue with a worker below
// the thresholds (its pool's, or its adapter's workers': saturated), or
// that waits only on tenant caps. The queues (the pools' and the
// adapters') are looked at round-robin from the one after the queue
// released from last; a queue that releases nothing now (saturated, its
// tenants at their caps, a staggering hold) passes the turn to the next.
// Called when capacity may have freed: a request's first token, its end,
// a released request's booking, a staggering hold's end.
func (g *gate) kick() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastProbe = g.clock()
	if g.releasing != 0 {
		return
	}
	start, found := slices.BinarySearchFunc(g.names, g.last, queueKey.compare)
	if found {
		start++
	}
	for i := range len(g.names) {
		k := g.names[(start+i)%len(g.names)]
		q := g.lookup(k)
		for q.Len() > 0 && !g.saturated(k) {
			e, ok := g.pop(q)
			if !ok {
				break
			}
			delete(g.planned, e.ID)
			ch, ok := g.waiters[e.ID]
			if !ok {
				q.Done(e.Tenant) // its waiter is gone; try the next
				continue
			}
			delete(g.waiters, e.ID)
			ch <- struct{}{}
			g.releasing, g.last = 1, k
			return // one at a time: it books, then kicks the next
		}
	}
}

// pop is the next request to release from q (one key's queue): the
// queue's next, unless staggered release holds it (admission.Queue.Hold:
// its tenant crowds another and its prefill, predicted on the worker it
// would be routed to, would end too close to another's); then the next
// of a tenant that does not crowd, or none until the hold is over (a
// timer kicks then). The prediction plans the request under the gate's
// lock: staggering's cost, paid only while a tenant crowds another.
func (g *gate) pop(q *admission.Queue) (admission.Entry, bool) {
	if q.Staggers() {
		if e, ok := q.Peek(); ok && q.Crowds(e.Tenant) {
			if req, ok := g.planned[e.ID]; ok {
				if hold := q.Hold(g.clock(), g.predict(req)); hold > 0 {
					if e.ID != g.lastHeld {
						g.lastHeld = e.ID
						g.m.holds.Inc()
					}
					if e, ok := q.PopUncrowded(); ok {
						return e, true
					}
					g.wakeIn(hold)
					return admission.Entry{}, false
				}
			}
		}
	}
	return q.Pop()
}

// predict is the least prefill time of req on the worker of its pool
// below the thresholds it would be routed to now (0 when none).
func (g *gate) predict(req router.Request) time.Duration {
	req.ID = ""
	if req.AllowedWorkers = g.unsaturated(req.Model, req.AllowedWorkers); len(req.AllowedWorkers) == 0 {
		return 0
	}
	d, err := g.router.Plan(req)
	if err != nil {
		return 0
	}
	return g.prefillOn(req, d)
}

// prefillOn is the least time to req's first token on d's worker
// (admission.LeastPrefill, from that worker's time model), 0 when d
// chose none.
func (g *gate) prefillOn(req router.Request, d router.Decision) time.Duration {
	if d.Chosen < 0 || d.Chosen >= len(d.Candidates) {
		return 0
	}
	row := d.ChosenRow()
	pm, ok := g.router.PrefillModel(row.Worker)
	if !ok {
		pm = router.PrefillModel{Prefill: timemodel.PriorPrefill, BlockSize: g.blockSize(req.Model)}
	}
	return admission.LeastPrefill(pm.Prefill, row, len(req.Tokens), pm.BlockSize, pm.MaxBatchedTokens)
}

// unsaturated narrows allowed (nil: every worker) to the workers of model
// pool with a rank below the queue thresholds (another pool's workers
// could not take the request).
func (g *gate) unsaturated(pool string, allowed []kvevent.WorkerID) []kvevent.WorkerID {
	var src interface {
		Workers() ([]router.WorkerInfo, []bool)
		RankSaturated(scheduler.Thresholds, kvevent.WorkerRank) bool
	} = g.router
	if r := g.poolRouter(pool); r != nil {
		src = r
	}
	infos, down := src.Workers()
	var out []kvevent.WorkerID
	for i, w := range infos {
		if (i < len(down) && down[i]) || (len(allowed) > 0 && !slices.Contains(allowed, w.ID)) {
			continue
		}
		for r := w.DPStart; r < w.DPStart+max(w.DPSize, 1); r++ {
			if !src.RankSaturated(g.cfg.Thresholds, kvevent.WorkerRank{ID: w.ID, Rank: kvevent.DPRank(r)}) {
				out = append(out, w.ID)
				break
			}
		}
	}
	return out
}

// poolRouter is model pool's own router when the front door routes
// through per-model pools (nil otherwise: the one router is every
// request's pool).
func (g *gate) poolRouter(pool string) *router.Router {
	if pr, ok := g.router.(pooled); ok {
		if r, ok := pr.Pool(pool); ok {
			return r
		}
	}
	return nil
}

// blockSize is model pool's block size.
func (g *gate) blockSize(pool string) int {
	if r := g.poolRouter(pool); r != nil {
		return r.Config().BlockSize
	}
	return g.router.Config().BlockSize
}

// wakeIn kicks after d unless a kick is already due sooner. Called with
// g.mu held.
func (g *gate) wakeIn(d time.Duration) {
	at := g.clock().Add(d)
	if g.wake != nil && g.due.After(g.clock()) && !g.due.After(at) {
		return
	}
	g.due = at
	if g.wake == nil {
		g.wake = time.AfterFunc(d, g.kick)
		return
	}
	g.wake.Reset(d)
}

// started tells staggered release when the prefill of req, just routed
// by d, is predicted to end (in k's queue).
func (g *gate) started(k queueKey, req router.Request, d router.Decision) {
	if !g.q.Staggers() {
		return
	}
	pred := g.prefillOn(req, d)
	g.mu.Lock()
	now := g.clock()
	g.queue(k).Started(req.ID, now, now.Add(pred))
	g.mu.Unlock()
}

// staggering reports whether staggered release is on and two tenants
// or more are active in k's queue (admission.Queue.Contended).
func (g *gate) staggering(k queueKey) bool {
	if !g.q.Staggers() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	q := g.lookup(k)
	return q != nil && q.Contended()
}

// finished tells staggered release that request id's prefill, in k's
// queue, ended.
func (g *gate) finished(k queueKey, id string) {
	if !g.q.Staggers() {
		return
	}
	g.mu.Lock()
	if q := g.lookup(k); q != nil {
		q.Finished(id)
		g.tidy(k)
	}
	g.mu.Unlock()
}

// probe kicks unless a kick ran within Recheck.
func (g *gate) probe() {
	g.mu.Lock()
	due := g.clock().Sub(g.lastProbe) >= g.cfg.Recheck
	g.mu.Unlock()
	if due {
		g.kick()
	}
}

// done ends ex's count in flight for its tenant.
func (g *gate) done(ex *exchange) {
	if !ex.adm.counted {
		return
	}
	ex.adm.counted = false
	g.mu.Lock()
	if q := g.lookup(ex.adm.key); q != nil { // there while ex is counted
		q.Done(ex.adm.tenant)
		g.tidy(ex.adm.key)
	}
	g.mu.Unlock()
	g.kick()
}

// predictedPrefill is the prompt less the longest cached prefix any
// worker of its pool holds, in tokens (WSPT's size, fair queueing's
// charge).
func (g *gate) predictedPrefill(req router.Request) float64 {
	req.ID = ""
	d, _ := g.router.Plan(req)
	best := 0
	for _, c := range d.Candidates {
		best = max(best, c.Overlap.Device)
	}
	return float64(max(len(req.Tokens)-best*g.blockSize(req.Model), 1))
}

// view is the queue's state for the status page: every queue merged
// (admission.MergeViews).
func (g *gate) view() admission.View {
	g.mu.Lock()
	defer g.mu.Unlock()
	views := make([]admission.View, 0, len(g.names))
	for _, k := range g.names {
		views = append(views, g.lookup(k).View(math.MaxInt))
	}
	return admission.MergeViews(20, views...)
}

// poolWaiting is one queue's waiting requests, for the status page.
type poolWaiting struct {
	key     queueKey
	waiting int
}

// byPool is the queues (pools' and adapters') with requests waiting,
// most first (ties by key), at most limit of them.
func (g *gate) byPool(limit int) []poolWaiting {
	g.mu.Lock()
	var out []poolWaiting
	for _, k := range g.names {
		if n := g.lookup(k).Len(); n > 0 {
			out = append(out, poolWaiting{k, n})
		}
	}
	g.mu.Unlock()
	slices.SortStableFunc(out, func(a, b poolWaiting) int { return b.waiting - a.waiting }) // names sorted already
	return out[:min(len(out), limit)]
}

// writeQueueError answers a queue refusal; false when err is not one.
func (f *Frontend) writeQueueError(rw http.ResponseWriter, err error) (int, bool) {
	switch {
	case errors.Is(err, errOverShare):
		writeRetryAfter(rw, f.cfg.RetryAfter)
		writeError(rw, http.StatusTooManyRequests, typeRateLimit, codeOverShare, "", err.Error()+": retry later")
		return http.StatusTooManyRequests, true
	case errors.Is(err, errQueueTimeout), errors.Is(err, errQueueFull), errors.Is(err, errQueueLate):
		code := codeQueueTimeout
		switch {
		case errors.Is(err, errQueueFull):
			code = codeOverloaded
		case errors.Is(err, errQueueLate):
			code = codeQueueLate
		}
		writeRetryAfter(rw, f.cfg.RetryAfter)
		writeError(rw, http.StatusServiceUnavailable, typeOverloaded, code, "", "every worker is saturated: "+err.Error()+"; retry later")
		return http.StatusServiceUnavailable, true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return 499, true // the client left while waiting: nobody to answer
	}
	return 0, false
}

// queueMetrics are the admission queue's collectors.
type queueMetrics struct {
	requests *prometheus.CounterVec   // tenant, outcome
	wait     *prometheus.HistogramVec // outcome
	holds    prometheus.Counter       // requests a staggering hold delayed
	known    map[string]bool          // tenants named in the weights
}

func newQueueMetrics(reg *prometheus.Registry, g *gate, keyTenants []string) *queueMetrics {
	const ns, sub = "kvrouter", "queue"
	m := &queueMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "requests_total", Help: "Completion requests at the admission queue by tenant (\"default\" for none, \"other\" for tenants not named in the weights or keys) and outcome: bypassed (routed at once), queued, released, late (released, then refused: it could no longer meet the TTFT target), timeout, disconnected, full, over_share, pushed_out."},
			[]string{"tenant", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "wait_seconds", Help: "Time requests spent waiting in the admission queue, by outcome (released, timeout, disconnected, pushed_out).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"outcome"}),
		holds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "stagger_holds_total", Help: "Waiting requests whose release staggered release held (--router-queue-stagger-gap), each counted once however often it was looked at."}),
		known: map[string]bool{},
	}
	for t := range g.cfg.Admission.Weights {
		m.known[t] = true
	}
	for _, t := range keyTenants {
		m.known[t] = true
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
		Name: "depth", Help: "Requests waiting in the admission queue (every model pool's and LoRA adapter's queue)."}, func() float64 {
		g.mu.Lock()
		defer g.mu.Unlock()
		return float64(g.waiting())
	})
	reg.MustRegister(m.requests, m.wait, m.holds, depth)
	return m
}

// label bounds the tenant label: tenants named in the weights and API
// keys' tenants keep their names.
func (m *queueMetrics) label(tenant string) string {
	switch {
	case tenant == "":
		return "default"
	case m.known[tenant]:
		return tenant
	}
	return "other"
}

func (m *queueMetrics) count(tenant, outcome string) {
	m.requests.WithLabelValues(m.label(tenant), outcome).Inc()
}

func (m *queueMetrics) done(tenant, outcome string, waited time.Duration) {
	m.count(tenant, outcome)
	m.wait.WithLabelValues(outcome).Observe(waited.Seconds())
}

// queueJSON is the status JSON's "queue" (docs/api.md).
type queueJSON struct {
	Policy       string                 `json:"policy"`
	Waiting      int                    `json:"waiting"`
	OldestWaitMS float64                `json:"oldest_wait_ms"`
	Tenants      []admission.TenantView `json:"tenants"`
	// Models are the queues with requests waiting, each model's queue
	// apart and each LoRA adapter's apart from its model's; only in a
	// fleet of models (Deps.Models).
	Models []queueModelJSON `json:"models,omitempty"`
}

// queueModelJSON is one queue's line in queueJSON.Models: a model's, or
// with Adapter a LoRA adapter's (its requests, judged by the workers
// with it loaded).
type queueModelJSON struct {
	Model   string `json:"model"`
	Adapter string `json:"adapter,omitempty"`
	Waiting int    `json:"waiting"`
}

// queueView is the queue's state for the status page; nil when off.
func (f *Frontend) queueView(now time.Time) *queueJSON {
	if f.gate == nil {
		return nil
	}
	v := f.gate.view()
	q := &queueJSON{Policy: string(f.cfg.Queue.Admission.Policy), Waiting: v.Waiting, Tenants: v.Tenants}
	if q.Tenants == nil {
		q.Tenants = []admission.TenantView{}
	}
	if !v.OldestArrival.IsZero() {
		q.OldestWaitMS = float64(now.Sub(v.OldestArrival)) / float64(time.Millisecond)
	}
	if f.models != nil {
		for _, p := range f.gate.byPool(20) {
			name := p.key.pool
			if name == "" {
				name = f.cfg.Model
			}
			q.Models = append(q.Models, queueModelJSON{Model: name, Adapter: p.key.adapter, Waiting: p.waiting})
		}
	}
	return q
}
