package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/prometheus/client_golang/prometheus"
)

// Disaggregated prefill/decode serving: the front door as the PD proxy
// (docs/pd.md). A request to a fleet with prefill-role workers takes two
// hops, each booked on its own: the prefill hop on a prefill worker chosen
// by the KV-aware cost, the decode hop on a decode worker chosen by decode
// load.

// HeaderPrefillWorker names the worker that computed the prompt of a
// disaggregated request; empty when the prefill hop was skipped.
const HeaderPrefillWorker = "X-Kvrouter-Prefill-Worker"

// PD protocols.
const (
	// PDVLLM is vLLM's NixlConnector protocol: a non-streamed prefill hop
	// whose kv_transfer_params go to the decode hop.
	PDVLLM = "vllm"
	// PDSGLang is SGLang's bootstrap protocol: both hops at once, met in
	// a random bootstrap room on the prefill worker's bootstrap port.
	PDSGLang = "sglang"
)

// sglangBootstrapPort is SGLang's default bootstrap port, used for a
// prefill worker that registered none.
const sglangBootstrapPort = 8998

// PDConfig configures disaggregated serving.
type PDConfig struct {
	// Protocol is PDVLLM or PDSGLang. Default vllm.
	Protocol string
	// BypassTokens skips the prefill hop when the best prefill worker
	// would compute fewer prompt tokens than this (its uncached part): a
	// decode-capable worker serves the whole request. 0 never skips.
	// Default 0.
	BypassTokens int
	// PrefillTimeout bounds the prefill hop. Default 60 s.
	PrefillTimeout time.Duration
}

// DefaultPDConfig returns the documented defaults.
func DefaultPDConfig() PDConfig { return PDConfig{Protocol: PDVLLM, PrefillTimeout: time.Minute} }

func (c PDConfig) validate() error {
	switch {
	case c.Protocol != PDVLLM && c.Protocol != PDSGLang:
		return fmt.Errorf("%w: pd protocol %q: want vllm or sglang", ErrConfig, c.Protocol)
	case c.BypassTokens < 0:
		return fmt.Errorf("%w: pd bypass tokens %d is negative", ErrConfig, c.BypassTokens)
	case c.PrefillTimeout <= 0:
		return fmt.Errorf("%w: pd prefill timeout %v must be positive", ErrConfig, c.PrefillTimeout)
	}
	return nil
}

// pdJSON explains a disaggregated request's split (/v1/route, the
// decision record).
type pdJSON struct {
	Protocol       string        `json:"protocol"`
	PrefillWorker  string        `json:"prefill_worker"`
	Bypassed       bool          `json:"bypassed"`
	Reason         string        `json:"reason"`
	UncachedTokens int           `json:"uncached_tokens"`
	BypassTokens   int           `json:"bypass_tokens"`
	Prefill        *decisionJSON `json:"prefill,omitempty"`
}

// pdMetrics count the disaggregated requests.
type pdMetrics struct {
	requests *prometheus.CounterVec // path: disaggregated, bypass
	failures *prometheus.CounterVec // reason
}

func newPDMetrics(reg *prometheus.Registry) *pdMetrics {
	m := &pdMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_requests_total",
			Help: "Requests routed in a disaggregated fleet, by path (disaggregated: prefill and decode hops; bypass: the prefill hop skipped)."}, []string{"path"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_pd_prefill_failures_total",
			Help: "Prefill hops that failed, by reason (connect, status_5xx, read, timeout, unknown_worker)."}, []string{"reason"}),
	}
	reg.MustRegister(m.requests, m.failures)
	return m
}

// roleChecker is optionally implemented by the Router: whether a worker
// of a role is known. *router.Router implements it.
type roleChecker interface {
	HasRole(role router.Role) bool
}

var (
	_ roleChecker = (*router.Router)(nil)
	_ roleChecker = (*router.Pools)(nil)
)

// disaggregated reports whether requests take the PD path: the router
// knows prefill-role workers.
func (f *Frontend) disaggregated() bool {
	rc, ok := f.router.(roleChecker)
	return ok && rc.HasRole(router.RolePrefill)
}

// prefillHop is a request's prefill decision: booked on a prefill worker,
// or skipped.
type prefillHop struct {
	f      *Frontend
	id     string
	req    router.Request // the booked hop's request (Phase PhasePrefill)
	key    queueKey       // the request's queue (keyOf), for staggered release
	d      router.Decision
	entry  WorkerEntry
	view   pdJSON
	once   sync.Once
	bypass bool
}

// free ends the prefill booking, once; for staggered release the
// request's prefill ended there (as a whole request's does at its first
// token).
func (p *prefillHop) free() {
	if p.bypass {
		return
	}
	p.once.Do(func() {
		p.f.m.lifecycleCall("mark_prefill_completed", p.f.router.MarkPrefillCompleted(p.id))
		if p.f.gate != nil {
			p.f.gate.finished(p.key, p.id)
		}
		p.f.free(p.id)
	})
}

// choosePrefill plans the prefill hop among the prefill workers not
// excluded, skips it when the uncached part is under the bypass threshold
// or no prefill worker is left, and otherwise books it on the planned
// worker.
func (f *Frontend) choosePrefill(ex *exchange, excluded []kvevent.WorkerID) *prefillHop {
	p := &prefillHop{f: f, view: pdJSON{Protocol: f.cfg.PD.Protocol, BypassTokens: f.cfg.PD.BypassTokens}}
	skip := func(reason string) *prefillHop {
		p.bypass, p.view.Bypassed, p.view.Reason = true, true, reason
		return p
	}
	req := f.routerRequest(ex, f.newRequestID(), nil) // the request's model, salt and adapter
	req.ExpectedOutputTokens, req.Phase = 1, router.PhasePrefill
	if len(excluded) > 0 {
		if req.AllowedWorkers = f.allowedExcept(excluded, req.AllowedWorkers); len(req.AllowedWorkers) == 0 {
			return skip("no prefill worker left")
		}
	}
	plan, err := f.router.Plan(req)
	if err != nil {
		return skip("no prefill worker: " + clientMessage(err, router.ErrNoCandidates))
	}
	v := f.decisionView(plan, true)
	p.view.Prefill, p.view.UncachedTokens = &v, plan.PrefillTokens
	if plan.PrefillTokens < f.cfg.PD.BypassTokens {
		return skip(fmt.Sprintf("the best prefill worker %s would compute %d uncached prompt tokens, under the bypass threshold of %d",
			f.workerName(plan.Worker.ID), plan.PrefillTokens, f.cfg.PD.BypassTokens))
	}
	req.PinnedWorker, req.HasPinned = plan.Worker.ID, true
	d, err := f.router.Route(req)
	if err != nil {
		return skip("prefill booking refused: " + err.Error())
	}
	entry, ok := f.dir.Lookup(d.Worker.ID)
	if !ok || entry.URL == "" {
		f.free(req.ID)
		return skip("prefill worker has no URL in the directory")
	}
	p.id, p.req, p.key, p.d, p.entry = req.ID, req, ex.adm.key, d, entry
	p.view.PrefillWorker = f.workerName(d.Worker.ID)
	p.view.Reason = fmt.Sprintf("prefill on %s (%d of %d prompt tokens uncached), decode by decode load", p.view.PrefillWorker,
		d.PrefillTokens, len(ex.tokens))
	return p
}

// forwardPD serves a request in a disaggregated fleet: the prefill hop
// (or its bypass) and the decode hop, retrying as forward does. A prefill
// worker that fails is excluded and another one tried (the bypass when
// none is left); a decode worker failing before its first byte is
// excluded and the request starts again with a fresh prefill.
//
// With the admission queue on, the request first passes it, once (before
// its first prefill hop is chosen; retries do not pass it again), as
// routeFirst does an aggregated request's: see admitPD and firstBooked.
func (f *Frontend) forwardPD(rw http.ResponseWriter, r *http.Request, ex *exchange) {
	var exP, exD []kvevent.WorkerID
	var last *failure
	if err := f.admitPD(r, ex); err != nil {
		ex.rec.Outcome, ex.rec.Status = "refused: "+err.Error(), f.writeRouteError(rw, err, nil)
		return
	}
	if f.gate != nil {
		// Whatever path the first attempt takes, a released request's
		// turn ends (a no-op once firstBooked settled it).
		defer f.gate.settle(ex)
	}
	orig := ex.body
	defer func() { ex.body = orig }()
	expl, _ := f.explanations.Get().(*[]router.Explanation)
	if expl == nil {
		expl = new([]router.Explanation)
	}
	defer f.explanations.Put(expl)
	for attempt := 0; attempt <= f.cfg.MaxRetries; attempt++ {
		ex.body = orig
		pre := f.choosePrefill(ex, exP)
		phase := router.PhaseDecode
		if pre.bypass {
			phase = router.PhaseWhole
		}
		req := f.routerRequest(ex, f.newRequestID(), *expl)
		req.Phase = phase
		if len(exD) > 0 {
			if req.AllowedWorkers = f.allowedExcept(exD, req.AllowedWorkers); len(req.AllowedWorkers) == 0 {
				pre.free()
				break
			}
		}
		d, err := f.route(ex, req, attempt)
		if attempt == 0 {
			err = f.firstBooked(ex, pre, req, d, err)
		}
		*expl = d.Candidates
		ex.rec.Decision.PD = &pre.view
		if err != nil {
			pre.free()
			if last != nil {
				break
			}
			ex.rec.Decision = f.decisionView(d, false)
			ex.rec.Decision.PD = &pre.view
			ex.rec.Outcome, ex.rec.Status = "refused: "+err.Error(), f.writeRouteError(rw, err, nil)
			return
		}
		entry, ok := f.dir.Lookup(d.Worker.ID)
		if !ok || entry.URL == "" {
			pre.free()
			f.free(req.ID)
			exD = append(exD, d.Worker.ID)
			last = &failure{reason: "unknown_worker", worker: ex.rec.Worker, err: errors.New("worker has no URL in the directory")}
			continue
		}
		path := "disaggregated"
		if pre.bypass {
			path = "bypass"
		}
		f.pdm.requests.WithLabelValues(path).Inc()
		rw.Header().Set(HeaderPrefillWorker, pre.view.PrefillWorker)
		var done func()
		if !pre.bypass {
			var fl *failure
			var answered bool
			if done, fl, answered = f.startPrefill(rw, r, ex, pre); answered {
				f.free(req.ID)
				return
			}
			if fl != nil {
				f.free(req.ID)
				exP = append(exP, pre.d.Worker.ID)
				last = fl
				if r.Context().Err() != nil {
					ex.rec.Outcome, ex.rec.Status = "client disconnected", 499
					return
				}
				continue
			}
		}
		last = f.attempt(rw, r, ex, req.ID, d, entry)
		if done != nil {
			done()
		}
		if last == nil {
			return
		}
		exD = append(exD, d.Worker.ID)
		if !f.failedBeforeFirstByte(r, ex, req.ID, d, last, attempt) {
			return
		}
	}
	rw.Header().Del(HeaderPrefillWorker)
	f.answerFailed(rw, ex, last)
}

// admitPD passes a disaggregated request through the admission queue
// when it is on (gate.wait: at once, or once its pool's queue releases
// it), counting it in flight for its tenant until serveExchange's
// endAdmission. It is judged as a prefill hop: its predicted prefill
// (WSPT's size, fair queueing's charge, staggered release's prediction)
// is planned among the prefill workers, and its pool is saturated when
// either its prefill-role workers or its decode-side workers are all over
// the thresholds (router.Router.HopsSaturated). A request whose prefill
// hop is then skipped (--pd-bypass-tokens) has waited as any other.
//
// Left out for disaggregated requests: staggered release's narrowing of a
// released request to the workers below the thresholds (routeFirst's
// unsaturated): the prefill and decode workers are chosen as without the
// queue. Session affinity is not applied on the PD path either.
func (f *Frontend) admitPD(r *http.Request, ex *exchange) error {
	if f.gate == nil {
		return nil
	}
	req := f.routerRequest(ex, f.newRequestID(), nil)
	req.ExpectedOutputTokens, req.Phase = 1, router.PhasePrefill
	return f.gate.wait(r.Context(), ex, req)
}

// firstBooked is routeFirst's bookkeeping for a disaggregated request's
// first attempt, once its decode hop is booked (req routed by d) or
// refused (err): staggered release is told when its prefill is predicted
// to end (gate.started, on the prefill worker, or on the decode worker
// when the prefill hop was skipped; gate.finished is told when that
// prefill ends: the prefill hop's end, or the bypassed request's first
// token), a released request that can no longer meet the TTFT target on
// that worker is refused (gate.late: both bookings freed, errQueueLate),
// and the queue may release the next (gate.settle). It returns the
// attempt's error.
func (f *Frontend) firstBooked(ex *exchange, pre *prefillHop, req router.Request, d router.Decision, err error) error {
	g := f.gate
	if g == nil {
		return err
	}
	defer g.settle(ex)
	if err != nil {
		return err
	}
	hop, hd := req, d
	if !pre.bypass {
		hop, hd = pre.req, pre.d
	}
	g.started(ex.adm.key, hop, hd)
	if g.late(ex, hop, hd) {
		// Too late to meet the TTFT target: give the capacity to the
		// next one (the caller frees the prefill hop).
		f.free(req.ID)
		g.finished(ex.adm.key, hop.ID)
		return errQueueLate
	}
	return nil
}

// startPrefill runs the prefill hop and sets ex.body to the decode hop's
// body. vLLM: the hop runs to its answer here (its booking then ends);
// SGLang: it runs beside the decode hop and done, called once the decode
// hop is over, cancels what is left of it and waits for it. fl is the
// prefill worker's failure; answered says the client got the prefill
// worker's 4xx.
func (f *Frontend) startPrefill(rw http.ResponseWriter, r *http.Request, ex *exchange, pre *prefillHop) (done func(), fl *failure, answered bool) {
	if f.cfg.PD.Protocol == PDSGLang {
		u, err := url.Parse(pre.entry.URL)
		if err != nil {
			pre.free()
			return nil, f.prefillFailed(pre, "connect", err), false
		}
		port := pre.entry.BootstrapPort
		if port == 0 {
			port = sglangBootstrapPort
		}
		body, err := withFields(ex.body, map[string]any{"bootstrap_host": u.Hostname(), "bootstrap_port": port,
			"bootstrap_room": rand.Uint64() >> 1})
		if err != nil {
			pre.free()
			return nil, f.prefillFailed(pre, "connect", err), false
		}
		ex.body = body
		ctx, cancel := context.WithTimeout(r.Context(), f.cfg.PD.PrefillTimeout)
		res := make(chan *failure, 1)
		go func() {
			_, fl, _ := f.prefillRequest(ctx, ex, pre, body)
			pre.free()
			res <- fl
		}()
		return func() {
			cancel()
			if fl := <-res; fl != nil && r.Context().Err() == nil && !errors.Is(fl.err, context.Canceled) {
				f.log.Warn("sglang prefill hop failed", "worker", fl.worker, "reason", fl.reason, "err", fl.err)
			}
		}, nil, false
	}
	body, err := vllmPrefillBody(ex.body)
	if err != nil {
		pre.free()
		return nil, f.prefillFailed(pre, "connect", err), false
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.PD.PrefillTimeout)
	defer cancel()
	sent := f.clock()
	answer, fl, resp := f.prefillRequest(ctx, ex, pre, body)
	pre.free()
	if fl != nil {
		return nil, fl, false
	}
	if resp.StatusCode >= 400 {
		f.relayClientError(rw, ex, resp, answer)
		return nil, nil, true
	}
	f.observePrefill(ex, pre, f.clock().Sub(sent))
	var a struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(answer, &a) == nil && len(a.KVTransferParams) > 0 && !bytes.Equal(a.KVTransferParams, []byte("null")) {
		if body, err := withFields(ex.body, map[string]any{"kv_transfer_params": a.KVTransferParams}); err == nil {
			ex.body = body
		}
	} else {
		pre.view.Reason += "; the prefill answer carried no kv_transfer_params (the decode worker computes the prompt)"
	}
	return nil, nil, false
}

// prefillRequest sends body to the prefill worker and reads its answer
// (at most 1 MiB). A connection error, a 5xx, a broken body or the
// timeout is a failure; a 4xx comes back with its body.
func (f *Frontend) prefillRequest(ctx context.Context, ex *exchange, pre *prefillHop, body []byte) ([]byte, *failure, *http.Response) {
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(pre.entry.URL, "/")+ex.path, bytes.NewReader(body))
	if err != nil {
		return nil, f.prefillFailed(pre, "connect", err), nil
	}
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("X-Request-Id", pre.id)
	resp, err := f.client.Do(up)
	if err != nil {
		return nil, f.prefillFailed(pre, timeoutReason(ctx, "connect"), err), nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case err != nil:
		return nil, f.prefillFailed(pre, timeoutReason(ctx, "read"), err), nil
	case resp.StatusCode >= 500:
		fl := f.prefillFailed(pre, "status_5xx", fmt.Errorf("status %d", resp.StatusCode))
		fl.status, fl.header, fl.body = resp.StatusCode, resp.Header.Clone(), b
		return nil, fl, nil
	}
	return b, nil, resp
}

func timeoutReason(ctx context.Context, reason string) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return "timeout"
	}
	return reason
}

// prefillFailed counts, logs and reports a prefill worker's failure.
func (f *Frontend) prefillFailed(pre *prefillHop, reason string, err error) *failure {
	name := pre.view.PrefillWorker
	f.pdm.failures.WithLabelValues(reason).Inc()
	f.log.Warn("prefill worker failed", "worker", name, "reason", reason, "err", err, "request_id", pre.id)
	if fr, ok := f.dir.(FailureReporter); ok && reason != "timeout" {
		fr.WorkerFailed(pre.d.Worker.ID, reason, err)
	}
	return &failure{reason: "prefill_" + reason, worker: name, err: err}
}

// vllmPrefillBody is the prefill hop's body: the client's with
// kv_transfer_params asking for a remote decode, not streamed, one output
// token, and no minimum token counts.
func vllmPrefillBody(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("request body must be a JSON object: %w", ErrBadRequest)
	}
	m["kv_transfer_params"] = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)
	m["stream"] = json.RawMessage("false")
	m["max_tokens"] = json.RawMessage("1")
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = json.RawMessage("1")
	}
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		delete(m, k)
	}
	return json.Marshal(m)
}

// withFields returns body with fields set (replacing any the client sent).
func withFields(body []byte, fields map[string]any) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("request body must be a JSON object: %w", ErrBadRequest)
	}
	for k, v := range fields {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		m[k] = b
	}
	return json.Marshal(m)
}

// planPD is /v1/route's view of a disaggregated fleet: the prefill choice
// (or why it would be skipped) beside the decode decision d. base is the
// request as /v1/route parsed it (model, salt, adapter and the workers the
// adapter allows), so the preview plans what serving it would.
func (f *Frontend) planPD(base router.Request) (router.Decision, *pdJSON, error) {
	p := &pdJSON{Protocol: f.cfg.PD.Protocol, BypassTokens: f.cfg.PD.BypassTokens}
	phase := router.PhaseDecode
	pre := base
	pre.ID, pre.ExpectedOutputTokens, pre.Phase = "plan-prefill", 1, router.PhasePrefill
	plan, err := f.router.Plan(pre)
	switch {
	case err != nil:
		p.Bypassed, p.Reason, phase = true, "no prefill worker: "+clientMessage(err, router.ErrNoCandidates), router.PhaseWhole
	default:
		v := f.decisionView(plan, true)
		v.RequestID = ""
		p.Prefill, p.UncachedTokens, p.PrefillWorker = &v, plan.PrefillTokens, f.workerName(plan.Worker.ID)
		p.Reason = fmt.Sprintf("prefill on %s (%d of %d prompt tokens uncached), decode by decode load", p.PrefillWorker, plan.PrefillTokens, len(base.Tokens))
		if plan.PrefillTokens < f.cfg.PD.BypassTokens {
			p.Bypassed, p.PrefillWorker, phase = true, "", router.PhaseWhole
			p.Reason = fmt.Sprintf("the best prefill worker %s would compute %d uncached prompt tokens, under the bypass threshold of %d",
				f.workerName(plan.Worker.ID), plan.PrefillTokens, f.cfg.PD.BypassTokens)
		}
	}
	dec := base
	dec.Phase = phase
	d, err := f.router.Plan(dec)
	return d, p, err
}

// observePrefill teaches the prefill worker's time model a vLLM prefill
// hop's time to first token: the answer of a one-token, unstreamed
// request comes right after its first token. (An SGLang prefill answers
// on its own schedule beside the decode hop, so it teaches nothing.)
func (f *Frontend) observePrefill(ex *exchange, pre *prefillHop, ttft time.Duration) {
	d := pre.d
	if ttft <= 0 || d.Chosen < 0 || d.Chosen >= len(d.Candidates) {
		return
	}
	row := d.ChosenRow()
	f.router.Observe(d.Worker, router.Sample{
		PromptTokens:        len(ex.tokens),
		CachedTokens:        d.OverlapBlocks * f.blockSize,
		QueuedPrefillTokens: row.ActivePrefillTokens, QueuedPrefillElapsed: row.PrefillElapsed,
		ActiveRequests: row.ActiveRequests,
		ActiveBlocks:   row.ActiveBlocks,
		TTFT:           ttft,
	}, f.clock())
}
