package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// Disaggregated fleets (docs/pd.md): with PrefillWorkers > 0 the first
// PrefillWorkers engines only prefill and the next DecodeWorkers only
// decode. A request's prefill hop is booked on a prefill engine by the
// KV-aware cost (one output token, its blocks held), its decode hop on a
// decode engine by decode load; when the prefill ends, the blocks the
// decode engine lacks are transferred (Engine.TransferTime), then the
// decode engine takes the request with its prompt KV in place. A prompt
// whose uncached part is under BypassTokens skips the prefill hop.

// role is engine w's role.
func (c Config) role(w int) router.Role {
	switch {
	case c.PrefillWorkers == 0:
		return router.RoleBoth
	case w < c.PrefillWorkers:
		return router.RolePrefill
	}
	return router.RoleDecode
}

func (c Config) validatePD() error {
	switch {
	case c.PrefillWorkers < 0 || c.DecodeWorkers < 0 || c.BypassTokens < 0:
		return fmt.Errorf("%w: negative prefill or decode workers or bypass tokens", ErrConfig)
	case (c.PrefillWorkers == 0) != (c.DecodeWorkers == 0):
		return fmt.Errorf("%w: a disaggregated fleet needs prefill and decode workers", ErrConfig)
	case c.PrefillWorkers > 0 && c.PrefillWorkers+c.DecodeWorkers != c.Workers:
		return fmt.Errorf("%w: %d prefill + %d decode workers ≠ %d workers", ErrConfig, c.PrefillWorkers, c.DecodeWorkers, c.Workers)
	}
	return nil
}

// pdFlight is a disaggregated request between its hops.
type pdFlight struct {
	req     workload.Request
	prefill int // the prefill engine
	decode  int // the decode engine (its booking made with the prefill's)
	// sent is the prefill row's load at send time, for Observe.
	sent router.Sample
}

// issuePD issues a request in a disaggregated fleet; false when it was
// bypassed (the caller routes it whole).
func (r *run) issuePD(req workload.Request) bool {
	id := uint64(req.ID)
	sid := strconv.FormatUint(id, 10)
	preq := router.Request{ID: sid + "p", Tokens: req.Prompt, ExpectedOutputTokens: 1, Phase: router.PhasePrefill}
	plan, err := r.rt.Plan(preq)
	if err != nil || plan.PrefillTokens < r.cfg.BypassTokens {
		r.bypassed++
		return false
	}
	preq.PinnedWorker, preq.HasPinned = plan.Worker.ID, true
	pd, err := r.rt.Route(preq)
	if err != nil {
		return false
	}
	dd, err := r.rt.Route(router.Request{ID: sid, Tokens: req.Prompt, ExpectedOutputTokens: req.OutputLen, Phase: router.PhaseDecode})
	if err != nil {
		r.rt.Free(preq.ID)
		r.rec.Add(report.Record{Worker: -1, Issued: r.now, Failed: true})
		r.done(1)
		return true
	}
	p, d := int(pd.Worker.ID), int(dd.Worker.ID)
	if err := r.workers[p].eng.Add(mocker.Request{ID: id, Tokens: req.Prompt, MaxTokens: 1, Hold: true}); err != nil {
		r.rt.Free(preq.ID)
		r.rt.Free(sid)
		r.rec.Add(report.Record{Worker: d, Issued: r.now, Failed: true})
		r.done(1)
		return true
	}
	pr, dr := pd.ChosenRow(), dd.ChosenRow()
	r.flights[id] = &flight{issued: r.now, worker: d, prompt: len(req.Prompt), sentAt: r.now, sent: router.Sample{
		QueuedPrefillTokens: dr.ActivePrefillTokens, QueuedPrefillElapsed: dr.PrefillElapsed, ActiveRequests: dr.ActiveRequests, ActiveBlocks: dr.ActiveBlocks}}
	r.pd[id] = &pdFlight{req: req, prefill: p, decode: d, sent: router.Sample{
		QueuedPrefillTokens: pr.ActivePrefillTokens, QueuedPrefillElapsed: pr.PrefillElapsed, ActiveRequests: pr.ActiveRequests, ActiveBlocks: pr.ActiveBlocks}}
	if !r.workers[p].busy {
		r.startStep(p)
	}
	return true
}

// prefillDone ends a request's prefill hop on engine w: its booking ends
// and the transfer to its decode engine starts.
func (r *run) prefillDone(w int, o mocker.Output) {
	pf := r.pd[o.ID]
	if pf == nil {
		return
	}
	sid := strconv.FormatUint(o.ID, 10)
	r.rt.MarkPrefillCompleted(sid + "p")
	r.rt.Free(sid + "p")
	if f := r.flights[o.ID]; f != nil {
		f.cached = o.CachedTokens
		// The prefill engine's first token is the hop's TTFT: its model
		// learns from it (the decode side's first token teaches none).
		if ttft := r.now - f.sentAt; ttft > 0 {
			s := pf.sent
			s.PromptTokens, s.CachedTokens, s.TTFT = len(pf.req.Prompt), o.CachedTokens, ttft
			r.rt.Observe(workerRank(w), s, time.Unix(0, 0).Add(r.now))
		}
	}
	bs := r.cfg.Engine.BlockSize
	need := (len(pf.req.Prompt)+bs-1)/bs - r.workers[pf.decode].eng.LocalPrefix(pf.req.Prompt)
	t := r.workers[pf.decode].eng.Config().TransferTime(need)
	r.transferred += int64(max(need, 0))
	r.pushTransfer(r.now+t, o.ID)
}

// transferDone frees the prefill engine's held blocks and hands the
// request to its decode engine.
func (r *run) transferDone(id uint64) {
	pf := r.pd[id]
	if pf == nil {
		return
	}
	delete(r.pd, id)
	r.workers[pf.prefill].eng.Release(id)
	f := r.flights[id]
	cached := 0
	if f != nil {
		cached = f.cached
	}
	if err := r.workers[pf.decode].eng.Add(mocker.Request{ID: id, Tokens: pf.req.Prompt, MaxTokens: pf.req.OutputLen, Remote: true}); err != nil {
		r.rt.Free(strconv.FormatUint(id, 10))
		delete(r.flights, id)
		r.rec.Add(report.Record{Worker: pf.decode, Issued: f.issued, Failed: true})
		r.done(1)
		return
	}
	if f != nil {
		f.cached = cached
		f.remote = true
	}
	if !r.workers[pf.decode].busy {
		r.startStep(pf.decode)
	}
}

// workerRank is engine w's router rank.
func workerRank(w int) kvevent.WorkerRank { return kvevent.WorkerRank{ID: kvevent.WorkerID(w)} }
