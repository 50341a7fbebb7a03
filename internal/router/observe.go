package router

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// Sample is what the edge observed of one request on one worker rank, for
// that rank's time model. The load fields are the chosen row's at send
// time (Decision.ChosenRow()).
type Sample struct {
	// PromptTokens is the prompt length.
	PromptTokens int
	// CachedTokens is the prompt tokens the worker had cached: its usage
	// report where it gives one, else the router's predicted overlap.
	CachedTokens int
	// QueuedPrefillTokens is the prefill booked on the worker rank when
	// the request was sent (the row's ActivePrefillTokens).
	QueuedPrefillTokens int
	// QueuedPrefillElapsed is how long the worker rank had been computing
	// that prefill when the request was sent (the row's PrefillElapsed).
	QueuedPrefillElapsed time.Duration
	// ActiveRequests is the requests running there at send time.
	ActiveRequests int
	// ActiveBlocks is the KV blocks held there at send time.
	ActiveBlocks float64
	// TTFT is the time to first token; 0 means none was seen.
	TTFT time.Duration
	// ITL is the mean time between output tokens; 0 means none (fewer
	// than two tokens).
	ITL time.Duration
	// Duration is how long the request held its blocks there (sent to
	// last token); 0 means unknown.
	Duration time.Duration
	// Served says the worker rank served the request's prefill even when
	// no TTFT was seen (a response that was not streamed): it counts
	// toward the rank's request rate (timemodel.Model.RequestRate).
	Served bool
}

// Observe folds one sample into worker rank w's time model at now. It
// returns false for an unknown worker rank. Pure: the caller passes the
// time.
func (r *Router) Observe(w kvevent.WorkerRank, s Sample, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.rankPos(w)
	if !ok {
		return false
	}
	info := r.ranks[p].ws.info
	m := r.models[w]
	if m == nil {
		m = timemodel.New(r.cfg.TimeModel)
		r.models[w] = m
	}
	if s.TTFT > 0 {
		j := timemodel.Job{Queued: s.QueuedPrefillTokens, Uncached: s.PromptTokens - max(s.CachedTokens, 0),
			Decodes: s.ActiveRequests, Chunk: info.MaxBatchedTokens, Elapsed: s.QueuedPrefillElapsed}
		m.ObservePrefill(j, s.TTFT, now)
	} else if s.Served {
		m.CountRequest(now)
	}
	if s.ITL > 0 {
		use := 0.0
		if info.KVCapacityBlocks > 0 {
			use = s.ActiveBlocks / float64(info.KVCapacityBlocks)
		}
		m.ObserveDecode(use, s.ITL, now)
	}
	m.ObserveResidence(s.Duration, now)
	r.stats.Observations++
	return true
}

// TimeModel is one worker rank's fitted time model, for the status page.
type TimeModel struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// Prefill is the per-pass prefill polynomial (ms over tokens).
	Prefill timemodel.Poly
	// Decode is the decode-step polynomial (ms over KV use fraction).
	Decode timemodel.Poly
	// PrefillSamples and DecodeSamples count the samples it accepted.
	PrefillSamples, DecodeSamples uint64
	// RequestRate is the rank's decayed request rate at its last
	// observation, in requests per second (timemodel.Model.RequestRate).
	RequestRate float64
}

// TimeModels returns every observed worker rank's model, in rank order.
func (r *Router) TimeModels() []TimeModel {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []TimeModel
	for _, rk := range r.ranks {
		if m := r.models[rk.w]; m != nil {
			p, d := m.Samples()
			out = append(out, TimeModel{Worker: rk.w, Prefill: m.Prefill(), Decode: m.Decode(), PrefillSamples: p, DecodeSamples: d,
				RequestRate: m.RequestRate(time.Time{})})
		}
	}
	return out
}

// PrefillModel is what a deadline check needs of one worker rank to
// predict a prefill there (admission.LeastPrefill): its fitted per-pass
// prefill polynomial (timemodel.PriorPrefill before it has samples), its
// max batched tokens (0: unknown) and its block size.
type PrefillModel struct {
	Prefill          timemodel.Poly
	MaxBatchedTokens int
	BlockSize        int
}

// PrefillModel returns worker rank w's PrefillModel; false for an unknown
// rank. It copies one rank's facts (TimeModels and Workers copy the
// fleet's, too much for every request the admission queue releases).
func (r *Router) PrefillModel(w kvevent.WorkerRank) (PrefillModel, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.rankPos(w)
	if !ok {
		return PrefillModel{}, false
	}
	info := r.ranks[p].ws.info
	pm := PrefillModel{Prefill: timemodel.PriorPrefill, MaxBatchedTokens: info.MaxBatchedTokens, BlockSize: r.cfg.BlockSize}
	if info.BlockSize > 0 {
		pm.BlockSize = info.BlockSize
	}
	if m := r.models[w]; m != nil {
		pm.Prefill = m.Prefill()
	}
	return pm, true
}

// policy builds the configured policy; kv-time reads r's models.
func (r *Router) policy(cfg Config) (scheduler.Policy, error) {
	if cfg.Policy == scheduler.PolicyKVTime {
		return scheduler.NewKVTime(cfg.KVTime, lockedModels{r})
	}
	return scheduler.NewPolicy(cfg.Policy)
}

// lockedModels serves the scheduler r's models; it runs under r.mu
// (Select is called with it held).
type lockedModels struct{ r *Router }

func (l lockedModels) Model(w kvevent.WorkerRank) *timemodel.Model { return l.r.models[w] }

// pruneModels drops the models of ranks no longer known; bounded memory
// follows the rank table.
func (r *Router) pruneModels() {
	for w := range r.models {
		if _, ok := r.pos[w]; !ok {
			delete(r.models, w)
		}
	}
}
