package sim

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// QueueConfig models the front door's admission queue: a request that
// finds every worker over the queue thresholds waits instead of being
// routed, and waiting requests are released in the queue's order
// whenever a request's prefill completes or a request ends and some
// worker is below them, each routed afresh (by the usual cost, among
// every worker) when released.
type QueueConfig struct {
	// Thresholds say when a worker is saturated.
	Thresholds scheduler.Thresholds
	// Admission orders the waiting requests (policy, length, aging,
	// tenant weights and caps); its TTFT target refuses a released
	// request that can no longer meet it.
	Admission admission.Config
	// Timeout is each request's longest wait; past it the request fails
	// (the front door's 503). 0 is no limit.
	Timeout time.Duration
}

func (c *QueueConfig) validate() error {
	if err := c.Thresholds.Validate(); err != nil {
		return fmt.Errorf("%w: queue thresholds: %w", ErrConfig, err)
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%w: queue timeout %v is negative", ErrConfig, c.Timeout)
	}
	if err := c.Admission.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// QueueStats is what the admission queue did in one run, and every
// tenant's TTFTs (for fairness comparisons).
type QueueStats struct {
	// Queued counts requests that waited.
	Queued int
	// TimedOut counts requests that waited past the timeout.
	TimedOut int
	// Late counts requests refused when released because they could no
	// longer meet the TTFT target (admission.Config.TTFTTarget).
	Late int
	// Refused counts requests refused at a full queue or pushed out.
	Refused int
	// MaxDepth is the longest the queue grew.
	MaxDepth int
	// Wait sums the time requests spent waiting.
	Wait time.Duration
	// TenantTTFTs are the TTFTs in ms of each named tenant's requests
	// (requests without a tenant are not kept here).
	TenantTTFTs map[string][]float64
	// TenantWaits are the same requests' waits in ms in the admission
	// queue, in the same order (0 for a request routed at once): a TTFT
	// less its wait is its time in the engine.
	TenantWaits map[string][]float64
}

// Goodput counts the requests whose TTFT was at most slo (failed ones
// never count).
func (o Outcome) Goodput(slo time.Duration) int {
	lim := float64(slo) / float64(time.Millisecond)
	n := 0
	for _, v := range o.TTFTs {
		if v <= lim {
			n++
		}
	}
	return n
}

// waiting is the run's admission queue and what it holds; q is nil when
// the run has none (then only the tenants' TTFTs are kept).
type waiting struct {
	q       *admission.Queue
	timeout time.Duration
	th      scheduler.Thresholds
	reqs    map[string]workload.Request
	arrived map[string]time.Duration
	kicked  bool          // a prefill completed or a request ended since the last release
	wakeAt  time.Duration // a release held by staggering looks again then (0: none pending)
	st      QueueStats
}

func newWaiting(c *QueueConfig) (*waiting, error) {
	w := &waiting{st: QueueStats{TenantTTFTs: map[string][]float64{}, TenantWaits: map[string][]float64{}}}
	if c == nil {
		return w, nil
	}
	q, err := admission.New(c.Admission)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	w.q, w.timeout, w.th = q, c.Timeout, c.Thresholds
	w.reqs, w.arrived = map[string]workload.Request{}, map[string]time.Duration{}
	return w, nil
}

func (w *waiting) len() int {
	if w.q == nil {
		return 0
	}
	return w.q.Len()
}

func (w *waiting) stats() QueueStats {
	if len(w.st.TenantTTFTs) == 0 {
		w.st.TenantTTFTs, w.st.TenantWaits = nil, nil
	}
	return w.st
}

// first notes request id's first token (its prefill left the load) after
// waiting wait in the admission queue.
func (w *waiting) first(id uint64, tenant string, ttft, wait time.Duration) {
	if w.q != nil {
		w.q.Finished(strconv.FormatUint(id, 10))
	}
	if tenant != "" {
		w.st.TenantTTFTs[tenant] = append(w.st.TenantTTFTs[tenant], float64(ttft)/float64(time.Millisecond))
		w.st.TenantWaits[tenant] = append(w.st.TenantWaits[tenant], float64(wait)/float64(time.Millisecond))
	}
	w.kicked = true
}

// done notes the end of a dispatched request.
func (w *waiting) done(tenant string) {
	if w.q != nil {
		w.q.Done(tenant)
	}
	w.kicked = true
}

func (r *run) virtual(d time.Duration) time.Time { return time.Unix(0, 0).Add(d) }

func (r *run) fail(at time.Duration) {
	r.rec.Add(report.Record{Worker: -1, Issued: at, Failed: true})
	r.done(1)
}

// admit routes req at once when nobody waits and some worker is below
// the queue thresholds, and queues it otherwise.
func (r *run) admit(req workload.Request) {
	w := r.wait
	if w.q.MayBypass(req.Tenant) && !r.rt.Saturated(w.th) {
		d, err := r.route(req)
		if err != nil {
			r.fail(r.now)
			return
		}
		w.q.Begin(req.Tenant)
		r.noteStarted(req, d)
		r.dispatch(req, d, r.now)
		return
	}
	id := strconv.Itoa(req.ID)
	e := admission.Entry{ID: id, Tenant: req.Tenant, Priority: req.Priority, Cost: r.predictedPrefill(req), Arrival: r.virtual(r.now)}
	if w.timeout > 0 {
		e.Deadline = e.Arrival.Add(w.timeout)
	}
	out, pushed, err := w.q.Push(e)
	if err != nil {
		w.st.Refused++
		r.fail(r.now)
		return
	}
	if pushed {
		w.st.Refused++
		r.fail(w.arrived[out.ID])
		delete(w.reqs, out.ID)
		delete(w.arrived, out.ID)
	}
	w.reqs[id], w.arrived[id] = req, r.now
	w.st.Queued++
	w.st.MaxDepth = max(w.st.MaxDepth, w.q.Len())
	// It may be releasable at once (capacity free but others waiting
	// on their tenant caps), as the front door's kick after a push.
	w.kicked = true
	r.releaseWaiting()
}

// predictedPrefill is the prompt less the longest cached prefix any
// worker holds, in tokens: WSPT's size.
func (r *run) predictedPrefill(req workload.Request) float64 {
	d, _ := r.rt.Plan(router.Request{ID: "plan", Tokens: req.Prompt})
	best := 0
	for _, c := range d.Candidates {
		best = max(best, c.Overlap.Device)
	}
	return float64(max(len(req.Prompt)-best*r.cfg.Engine.BlockSize, 1))
}

// releaseWaiting routes waiting requests in the queue's order while some
// worker is below the queue thresholds; one the router still refuses as
// busy (its own busy thresholds) goes back in its place, and one that
// can no longer meet the TTFT target on the worker it was routed to
// (admission.Queue.Late) is refused, its booking freed, and the next
// released. With staggered release a crowding tenant's request may be
// held (pop); then a request of a tenant that does not crowd goes
// instead, or none, and the queue looks again when the hold is over.
func (r *run) releaseWaiting() {
	w := r.wait
	if w.q == nil || !w.kicked {
		return
	}
	w.kicked = false
	for w.q.Len() > 0 && !r.rt.Saturated(w.th) {
		e, ok := r.pop()
		if !ok {
			return
		}
		req := w.reqs[e.ID]
		d, err := r.routeReleased(req)
		if errors.Is(err, router.ErrAllBusy) {
			w.q.Requeue(e)
			return
		}
		arrived := w.arrived[e.ID]
		delete(w.reqs, e.ID)
		delete(w.arrived, e.ID)
		w.st.Wait += r.now - arrived
		if err != nil {
			w.q.Done(e.Tenant)
			r.fail(arrived)
			continue
		}
		if w.q.Late(e, r.virtual(r.now), r.leastPrefill(req, d)) {
			r.rt.Free(strconv.Itoa(req.ID))
			w.q.Done(e.Tenant)
			w.st.Late++
			r.fail(arrived)
			continue
		}
		r.noteStarted(req, d)
		r.dispatch(req, d, arrived)
	}
}

// pop is the next request to release: the queue's next, unless
// staggered release holds it (admission.Queue.Hold: its tenant crowds
// another and its prefill, predicted on the worker it would be routed
// to, would end too close to another's); then the next of a tenant that
// does not crowd, or none until the hold is over (a wake event then).
func (r *run) pop() (admission.Entry, bool) {
	q := r.wait.q
	if q.Staggers() {
		if e, ok := q.Peek(); ok && q.Crowds(e.Tenant) {
			req := r.wait.reqs[e.ID]
			rreq := router.Request{ID: "plan", Tokens: req.Prompt, AllowedWorkers: r.unsaturated()}
			if d, err := r.rt.Plan(rreq); err == nil {
				if hold := q.Hold(r.virtual(r.now), r.prefillOn(req, d)); hold > 0 {
					if e, ok := q.PopUncrowded(); ok {
						return e, true
					}
					r.wakeAt(r.now + hold)
					return admission.Entry{}, false
				}
			}
		}
	}
	return q.Pop()
}

// wakeAt has the queue look again at t (staggered release's hold).
func (r *run) wakeAt(t time.Duration) {
	w := r.wait
	if w.wakeAt > r.now && w.wakeAt <= t {
		return // an earlier look is due
	}
	w.wakeAt = t
	r.push(t, evWake, 0)
}

// wake is a held release's look again.
func (r *run) wake() {
	if r.wait.wakeAt == r.now {
		r.wait.wakeAt = 0
	}
	r.wait.kicked = true
	r.releaseWaiting()
}

// unsaturated lists the workers below the queue thresholds.
func (r *run) unsaturated() []kvevent.WorkerID {
	var out []kvevent.WorkerID
	for i := range r.workers {
		if !r.rt.RankSaturated(r.wait.th, workerRank(i)) {
			out = append(out, kvevent.WorkerID(i))
		}
	}
	return out
}

// routeReleased routes a request the queue released: with staggered
// release while two tenants or more are active, among the workers below
// the queue thresholds only (a hold
// leaves a worker idle for a light tenant's request, which would
// otherwise go to a saturated worker holding its cached prefix; every
// worker when none is below them any more), else among every worker.
func (r *run) routeReleased(req workload.Request) (router.Decision, error) {
	if q := r.wait.q; !q.Staggers() || !q.Contended() {
		return r.route(req)
	}
	allowed := r.unsaturated()
	if len(allowed) == 0 {
		return r.route(req) // none below them any more: every worker, as the front door
	}
	return r.routeAmong(req, allowed)
}

// noteStarted tells staggered release when the prefill of req, just routed
// by d, is predicted to end.
func (r *run) noteStarted(req workload.Request, d router.Decision) {
	if q := r.wait.q; q.Staggers() {
		q.Started(strconv.Itoa(req.ID), r.virtual(r.now), r.virtual(r.now+r.prefillOn(req, d)))
	}
}

// expireWaiting fails the requests that waited past the timeout.
func (r *run) expireWaiting() {
	w := r.wait
	if w.q == nil || w.timeout == 0 {
		return
	}
	for _, e := range w.q.Expire(r.virtual(r.now)) {
		arrived := w.arrived[e.ID]
		delete(w.reqs, e.ID)
		delete(w.arrived, e.ID)
		w.st.TimedOut++
		w.st.Wait += r.now - arrived
		r.fail(arrived)
	}
}

// leastPrefill is the least time from now to req's first token on the
// worker d chose (admission.LeastPrefill), from that worker's time model
// (the prior before it has samples); 0 when the TTFT target is off.
func (r *run) leastPrefill(req workload.Request, d router.Decision) time.Duration {
	if r.wait.q.Config().TTFTTarget == 0 {
		return 0
	}
	return r.prefillOn(req, d)
}

// prefillOn is the least time from now to req's first token on the
// worker d chose (admission.LeastPrefill), 0 when d chose none.
func (r *run) prefillOn(req workload.Request, d router.Decision) time.Duration {
	if d.Chosen < 0 || d.Chosen >= len(d.Candidates) {
		return 0
	}
	row, ec := d.ChosenRow(), r.cfg.EngineConfig(int(d.Worker.ID))
	poly := timemodel.PriorPrefill
	if pm, ok := r.rt.PrefillModel(row.Worker); ok {
		poly = pm.Prefill
	}
	return admission.LeastPrefill(poly, row, len(req.Prompt), ec.BlockSize, ec.MaxNumBatchedTokens)
}
