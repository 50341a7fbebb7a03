package frontend

import "github.com/kvrouter/kvrouter/internal/scheduler"

// predictionJSON is one candidate's kv-time estimate in seconds.
type predictionJSON struct {
	QueueS   float64 `json:"queue_s"`
	PrefillS float64 `json:"prefill_s"`
	LoadS    float64 `json:"load_s"`
	KVWaitS  float64 `json:"kv_wait_s"`
	KVPressS float64 `json:"kv_pressure_s"`
	TTFTS    float64 `json:"ttft_s"`
	DecodeS  float64 `json:"decode_s"`
	TotalS   float64 `json:"total_s"`
	Error    float64 `json:"model_error"`
}

// predictionOf renders an eligible row's prediction under kv-time; nil
// otherwise.
func predictionOf(policy string, c scheduler.Explanation) *predictionJSON {
	if policy != scheduler.PolicyKVTime || c.Excluded != scheduler.Eligible {
		return nil
	}
	p := c.Prediction
	return &predictionJSON{QueueS: p.Queue, PrefillS: p.Prefill, LoadS: p.Load, KVWaitS: p.KVWait, KVPressS: p.KVPressure, TTFTS: p.TTFT, DecodeS: p.Decode, TotalS: p.Total, Error: p.Error}
}
