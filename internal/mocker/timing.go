package mocker

import (
	"math"
	"time"

	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// PrefillMs is the modelled time in milliseconds of a forward pass over t
// new tokens (Dynamo's polynomial fitted on vLLM), before any speedup. Zero
// tokens cost nothing.
// The polynomial is the router's time model prior, owned there.
func PrefillMs(t int) float64 { return timemodel.PriorPrefillMs(t) }

// DecodeMs is the modelled time in milliseconds of one decode step when a
// fraction p of the KV cache is in use, before any speedup; at least 1 ms.
func DecodeMs(p float64) float64 { return timemodel.PriorDecodeMs(p) }

// stepDuration models one step. A step that only decodes costs DecodeMs; a
// step that only prefills costs PrefillMs of its new tokens. A mixed step is
// one forward pass over the prefill chunks and the decode tokens together,
// so it costs PrefillMs(prefill + decode tokens), but never less than the
// memory-bound decode step it also is: max of the two. Bringing blocks back
// from the CPU tier adds its transfer time serially.
func (c Config) stepDuration(prefillTokens, decodeTokens int, usage float64, onboardTokens int) time.Duration {
	var ms float64
	dec := 0.0
	if decodeTokens > 0 {
		dec = DecodeMs(usage) / c.DecodeSpeedupRatio
	}
	if prefillTokens > 0 {
		ms = math.Max(PrefillMs(prefillTokens+decodeTokens), dec)
	} else {
		ms = dec
	}
	ms /= c.SpeedupRatio
	d := time.Duration(ms * float64(time.Millisecond))
	if onboardTokens > 0 {
		secs := float64(onboardTokens) * float64(c.KVBytesPerToken) / c.KVTransferBandwidth
		d += time.Duration(secs / c.SpeedupRatio * float64(time.Second))
	}
	return d
}
