package timemodel

import "math"

// The prior: Dynamo's mocker polynomials fitted on vLLM, in milliseconds.
// This package is their one owner; the mocker's timing calls
// PriorPrefillMs and PriorDecodeMs.
var (
	// PriorPrefill is the per-pass prefill polynomial: milliseconds of one
	// forward pass over n tokens.
	PriorPrefill = Poly{A: 16.50142, B: 1.518344e-2, C: 4.209989e-7}
	// PriorDecode is the decode-step polynomial: milliseconds of one
	// decode step at KV use fraction u.
	PriorDecode = Poly{A: 5.74, B: 54.01, C: -25.74}
)

// PriorDecodeFloorMs is the least a modelled decode step costs.
const PriorDecodeFloorMs = 1.0

// Transfer defaults for bringing cached KV back from a slower tier.
const (
	// DefaultKVBytesPerToken is one token's KV size (Qwen3-0.6B in bf16:
	// 28 layers × 2 × 8 KV heads × 128 head dim × 2 bytes).
	DefaultKVBytesPerToken = 114688
	// DefaultTransferBandwidth is the host-to-device bandwidth in bytes
	// per second.
	DefaultTransferBandwidth = 64e9
)

// Poly is a quadratic a + b·x + c·x².
type Poly struct {
	// A, B and C are the constant, linear and quadratic coefficients.
	A, B, C float64
}

// At evaluates the polynomial at x.
func (p Poly) At(x float64) float64 { return p.A + p.B*x + p.C*x*x }

// PriorPrefillMs is the prior time in milliseconds of one forward pass over
// t new tokens; zero tokens cost nothing.
func PriorPrefillMs(t int) float64 {
	if t <= 0 {
		return 0
	}
	return PriorPrefill.At(float64(t))
}

// PriorDecodeMs is the prior time in milliseconds of one decode step at KV
// use fraction u (clamped to [0, 1]); at least PriorDecodeFloorMs.
func PriorDecodeMs(u float64) float64 {
	u = clamp01(u)
	return math.Max(PriorDecode.At(u), PriorDecodeFloorMs)
}

// TransferSeconds is the time to bring tokens of KV back over a link of
// bandwidth bytes per second at bytesPerToken each; 0 for a non-positive
// bandwidth or count.
func TransferSeconds(tokens, bytesPerToken int, bandwidth float64) float64 {
	if tokens <= 0 || bytesPerToken <= 0 || !(bandwidth > 0) {
		return 0
	}
	return float64(tokens) * float64(bytesPerToken) / bandwidth
}

func clamp01(u float64) float64 {
	if !(u > 0) { // also NaN
		return 0
	}
	return math.Min(u, 1)
}
