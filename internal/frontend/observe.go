package frontend

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/router"
)

// observe tells the router's time model of the chosen worker rank what a
// finished 2xx stream showed: the time from sending to the first token,
// the mean gap between tokens, the worker's cached tokens (its usage
// report, else the router's predicted overlap) and the load the router had
// booked there when it chose. A 2xx response that is not a stream shows
// no first token: it only counts toward the rank's request rate (what
// kv-time's delay to later requests is priced with), unless it was a
// decode hop, whose prefill ran elsewhere.
func (a *try) observe() {
	tr := a.tr
	if tr == nil || a.d.Chosen < 0 || a.d.Chosen >= len(a.d.Candidates) {
		return
	}
	if !a.sse || !tr.started {
		if a.ok2xx && a.d.Phase != router.PhaseDecode {
			a.f.router.Observe(a.d.Worker, router.Sample{Served: true}, a.f.clock())
		}
		return
	}
	row := a.d.ChosenRow()
	s := router.Sample{
		PromptTokens:        len(a.ex.tokens),
		CachedTokens:        a.d.OverlapBlocks * a.f.blockSize,
		QueuedPrefillTokens: row.ActivePrefillTokens, QueuedPrefillElapsed: row.PrefillElapsed,
		ActiveRequests: row.ActiveRequests,
		ActiveBlocks:   row.ActiveBlocks,
		TTFT:           tr.firstAt.Sub(a.sentAt),
	}
	if tr.haveUsage {
		s.CachedTokens = tr.cached
		if tr.promptTokens > 0 {
			s.PromptTokens = tr.promptTokens
		}
	}
	if a.d.Phase == router.PhaseDecode {
		// A decode hop's first token waited for the KV transfer, not
		// for a prefill there: it teaches the decode model only.
		s.TTFT = 0
	}
	s.Duration = tr.lastToken.Sub(a.sentAt)
	if tr.generated >= 2 {
		s.ITL = tr.lastToken.Sub(tr.firstAt) / time.Duration(tr.generated-1)
	}
	a.f.router.Observe(a.d.Worker, s, a.f.clock())
}
