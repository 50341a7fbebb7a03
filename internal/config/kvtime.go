package config

import (
	"flag"
	"time"

	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// KVTime holds the kv-time policy's knobs (used with --router-mode
// kv-time; the time models learn whatever the mode).
type KVTime struct {
	// Tolerance is the relative near-tie band within which the longest
	// cached prefix wins (--kv-time-tolerance). Default 0.05.
	Tolerance float64
	// DecodeWeight weighs the delay a prefill adds to running decodes
	// against the request's own TTFT (--kv-time-decode-weight). Default 0.1.
	DecodeWeight float64
	// RecomputeWeight prices recomputing prompt tokens another worker
	// holds cached, in seconds of TTFT per second of that prefill
	// (--kv-time-recompute-weight). Default 8.
	RecomputeWeight float64
	// ITLWeight weighs what a prefill adds to running requests' mean
	// inter-token times against the request's own TTFT
	// (--kv-time-itl-weight). Default 1.
	ITLWeight float64
	// HalfLife is how fast the time models forget old samples
	// (--kv-time-half-life). Default 15s.
	HalfLife time.Duration
}

func defaultKVTime() KVTime {
	k, m := scheduler.DefaultKVTimeConfig(), timemodel.DefaultConfig()
	return KVTime{Tolerance: k.Tolerance, DecodeWeight: k.DecodeWeight, RecomputeWeight: k.RecomputeWeight, ITLWeight: k.ITLWeight, HalfLife: m.HalfLife}
}

// bindKVTime registers the kv-time flags onto the given fields; serve/up
// and sim share it.
func bindKVTime(fs *flag.FlagSet, tolerance, decodeWeight, recomputeWeight, itlWeight *float64, halfLife *time.Duration) {
	fs.Float64Var(tolerance, "kv-time-tolerance", *tolerance, "kv-time: floor of the relative near-tie band of predicted seconds (at least the fastest worker's model error) within which the longest cached prefix wins")
	fs.Float64Var(decodeWeight, "kv-time-decode-weight", *decodeWeight, "kv-time: weight of the delay a prefill adds to each running decode, against the request's own TTFT")
	fs.Float64Var(recomputeWeight, "kv-time-recompute-weight", *recomputeWeight, "kv-time: seconds of TTFT traded for one second of prefill spent recomputing prompt tokens another worker holds cached")
	fs.Float64Var(itlWeight, "kv-time-itl-weight", *itlWeight, "kv-time: seconds of TTFT traded for one second added to one running request's mean inter-token time by a prefill's stall")
	fs.DurationVar(halfLife, "kv-time-half-life", *halfLife, "half-life of the per-worker time models' samples")
}

func (k *KVTime) bind(fs *flag.FlagSet) {
	bindKVTime(fs, &k.Tolerance, &k.DecodeWeight, &k.RecomputeWeight, &k.ITLWeight, &k.HalfLife)
}

func (k KVTime) apply(rc *router.Config) {
	rc.KVTime.Tolerance = k.Tolerance
	rc.KVTime.DecodeWeight = k.DecodeWeight
	rc.KVTime.RecomputeWeight = k.RecomputeWeight
	rc.KVTime.ITLWeight = k.ITLWeight
	rc.TimeModel.HalfLife = k.HalfLife
}
