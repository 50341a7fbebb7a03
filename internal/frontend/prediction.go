package frontend

import (
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// predictionJSON is one candidate's kv-time estimate in seconds.
type predictionJSON struct {
	QueueS   float64 `json:"queue_s"`
	PrefillS float64 `json:"prefill_s"`
	LoadS    float64 `json:"load_s"`
	// TransferS is a decode hop's KV transfer from the prefill worker.
	TransferS float64 `json:"transfer_s,omitempty"`
	KVWaitS   float64 `json:"kv_wait_s"`
	KVPressS  float64 `json:"kv_pressure_s"`
	TTFTS     float64 `json:"ttft_s"`
	DecodeS   float64 `json:"decode_s"`
	// LaterS is the delay the prefill adds to later requests' first
	// tokens there; RecomputeS the price of recomputing what another
	// candidate holds cached.
	LaterS     float64 `json:"later_s"`
	RecomputeS float64 `json:"recompute_s"`
	TotalS     float64 `json:"total_s"`
	Error      float64 `json:"model_error"`
	// InFlightTokens is the prompt tokens counted as computed by a request
	// already prefilling them there, which this one would wait for.
	InFlightTokens int `json:"in_flight_tokens,omitempty"`
}

// predictionOf renders an eligible row's prediction under kv-time; nil
// otherwise.
func predictionOf(policy string, c scheduler.Explanation) *predictionJSON {
	if policy != scheduler.PolicyKVTime || c.Excluded != scheduler.Eligible {
		return nil
	}
	p := c.Prediction
	return &predictionJSON{QueueS: p.Queue, PrefillS: p.Prefill, LoadS: p.Load, TransferS: p.Transfer, KVWaitS: p.KVWait, KVPressS: p.KVPressure, TTFTS: p.TTFT, DecodeS: p.Decode, LaterS: p.Later, RecomputeS: p.Recompute, TotalS: p.Total, Error: p.Error, InFlightTokens: p.InFlight}
}

// timeModelJSON is one rank's fitted time model (/v1/workers): the
// per-pass prefill polynomial a + b·n + c·n² in ms over n tokens, the
// decode-step polynomial in ms over KV use, their sample counts, and what
// the prefill fit predicts for one pass of 1,000 tokens, and the rank's
// decayed request rate at its last observation.
type timeModelJSON struct {
	Prefill        [3]float64 `json:"prefill_ms_abc"`
	Decode         [3]float64 `json:"decode_ms_abc"`
	Prefill1kMs    float64    `json:"prefill_1k_tokens_ms"`
	PrefillSamples uint64     `json:"prefill_samples"`
	DecodeSamples  uint64     `json:"decode_samples"`
	RequestsPerS   float64    `json:"requests_per_s"`
}

func timeModelsByRank(ms []router.TimeModel) map[kvevent.WorkerRank]*timeModelJSON {
	out := make(map[kvevent.WorkerRank]*timeModelJSON, len(ms))
	for _, m := range ms {
		out[m.Worker] = &timeModelJSON{
			Prefill:     [3]float64{m.Prefill.A, m.Prefill.B, m.Prefill.C},
			Decode:      [3]float64{m.Decode.A, m.Decode.B, m.Decode.C},
			Prefill1kMs: m.Prefill.At(1000), PrefillSamples: m.PrefillSamples, DecodeSamples: m.DecodeSamples,
			RequestsPerS: m.RequestRate,
		}
	}
	return out
}
