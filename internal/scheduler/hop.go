package scheduler

// Hop is which part of a disaggregated request is being routed: the
// kv-time policy predicts a different time for each (KVTime.predict).
type Hop uint8

// Hops.
const (
	// HopWhole is a whole request on one worker (aggregated serving, or a
	// disaggregated request whose prefill hop was skipped); the zero value.
	HopWhole Hop = iota
	// HopPrefill is the prefill hop: the worker computes the prompt and
	// answers one token; nothing decodes there.
	HopPrefill
	// HopDecode is the decode hop: the prompt's KV arrives from the
	// prefill worker by transfer and the worker decodes.
	HopDecode
)
