package config

import (
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/router"
)

// Knobs are the router's cost and load-tracking options beyond the common
// ones of Router (Dynamo's names in parentheses). They are part of Router:
// its fields are promoted.
type Knobs struct {
	// OverlapScoreCreditDecay shrinks the device-cache credit of a worker
	// with more pending prefill than the least loaded candidate: the
	// credit is multiplied by 1 / (1 + decay × excess), excess being that
	// worker's extra pending prefill in blocks over the request's blocks
	// (--kv-overlap-score-credit-decay; overlap_score_credit_decay). A
	// factor, ≥ 0; 0 is off. Default 0.
	OverlapScoreCreditDecay float64
	// SharedCacheMultiplier is the credit, in blocks, per block held in a
	// shared cache pool beyond the device prefix
	// (--router-shared-cache-multiplier; shared_cache_multiplier). ≥ 0.
	// No worker reports a shared tier to the index yet, so it has no
	// effect today. Default 0.
	SharedCacheMultiplier float64
	// DecodeActiveRequestWeight adds this many blocks of cost per request
	// running on the worker (--router-decode-active-request-weight;
	// decode_active_request_weight). ≥ 0. Default 0.
	DecodeActiveRequestWeight float64
	// TrackPrefillTokens counts the prompt tokens still to prefill in a
	// worker's load and the request's own prompt in the cost
	// (--router-track-prefill-tokens; router_track_prefill_tokens); false
	// makes the prefill term 0. Default true.
	TrackPrefillTokens bool
	// AssumeKVReuse counts prompt blocks shared by requests running on one
	// worker once (--router-assume-kv-reuse; router_assume_kv_reuse);
	// false counts every request's blocks apart, for engines that do not
	// share blocks they received by transfer. Default true.
	AssumeKVReuse bool
	// ActiveSequenceStride keeps one tracking hash per this many prompt
	// blocks of a running request, each standing for that many blocks
	// (--router-active-sequence-stride; router_active_sequence_stride):
	// less memory and work per booking, coarser decode load. Blocks, in
	// [1, 65536]; every replica must use the same value. Default 1.
	ActiveSequenceStride int
	// TrackOutputBlocks grows a request's decode load by one block per
	// block size of generated tokens and, when the request says how many
	// it expects (max_tokens), counts its blocks at the fraction still to
	// generate (--router-track-output-blocks;
	// router_track_output_blocks). Default false.
	TrackOutputBlocks bool
}

// defaultKnobs are the router core's defaults.
func defaultKnobs(rc router.Config) Knobs {
	return Knobs{
		OverlapScoreCreditDecay:   rc.Scheduler.OverlapScoreCreditDecay,
		SharedCacheMultiplier:     rc.Scheduler.SharedCacheMultiplier,
		DecodeActiveRequestWeight: rc.Scheduler.DecodeActiveRequestWeight,
		TrackPrefillTokens:        rc.Scheduler.TrackPrefillTokens && rc.Sequences.TrackPrefillTokens,
		AssumeKVReuse:             rc.Sequences.AssumeKVReuse,
		ActiveSequenceStride:      rc.Sequences.ActiveSequenceStride,
		TrackOutputBlocks:         rc.Sequences.TrackOutputBlocks,
	}
}

// maxStride bounds --router-active-sequence-stride.
const maxStride = 1 << 16

// bind registers the knobs' flags.
func (k *Knobs) bind(fs *flag.FlagSet) {
	fs.Float64Var(&k.OverlapScoreCreditDecay, "kv-overlap-score-credit-decay", k.OverlapScoreCreditDecay, "shrink the cache credit of workers with more pending prefill than the least loaded: × 1/(1 + decay × excess blocks / request blocks) (0: off)")
	fs.Float64Var(&k.SharedCacheMultiplier, "router-shared-cache-multiplier", k.SharedCacheMultiplier, "credit in blocks per shared-cache-pool block beyond the device prefix")
	fs.Float64Var(&k.DecodeActiveRequestWeight, "router-decode-active-request-weight", k.DecodeActiveRequestWeight, "cost in blocks added per request running on the worker")
	fs.BoolVar(&k.TrackPrefillTokens, "router-track-prefill-tokens", k.TrackPrefillTokens, "count prompt tokens still to prefill in the load and the cost (the prefill term)")
	fs.BoolVar(&k.AssumeKVReuse, "router-assume-kv-reuse", k.AssumeKVReuse, "count prompt blocks shared by running requests on a worker once (false: every request's blocks apart)")
	fs.IntVar(&k.ActiveSequenceStride, "router-active-sequence-stride", k.ActiveSequenceStride, "track one hash per this many prompt blocks of a running request, 1-65536 (same on every replica)")
	fs.BoolVar(&k.TrackOutputBlocks, "router-track-output-blocks", k.TrackOutputBlocks, "grow a request's decode load with its generated tokens, weighted by the share of max_tokens left")
}

// validate checks the knobs, naming their flags.
func (k Knobs) validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"kv-overlap-score-credit-decay", k.OverlapScoreCreditDecay},
		{"router-shared-cache-multiplier", k.SharedCacheMultiplier},
		{"router-decode-active-request-weight", k.DecodeActiveRequestWeight},
	} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("--%s %v must be a finite number >= 0", f.name, f.v)
		}
	}
	if k.ActiveSequenceStride < 1 || k.ActiveSequenceStride > maxStride {
		return fmt.Errorf("--router-active-sequence-stride %d out of range [1, %d]", k.ActiveSequenceStride, maxStride)
	}
	return nil
}

// apply writes the knobs into the router core's configuration.
func (k Knobs) apply(rc *router.Config) {
	s, q := &rc.Scheduler, &rc.Sequences
	s.OverlapScoreCreditDecay = k.OverlapScoreCreditDecay
	s.SharedCacheMultiplier = k.SharedCacheMultiplier
	s.DecodeActiveRequestWeight = k.DecodeActiveRequestWeight
	s.TrackPrefillTokens, q.TrackPrefillTokens = k.TrackPrefillTokens, k.TrackPrefillTokens
	q.AssumeKVReuse = k.AssumeKVReuse
	q.ActiveSequenceStride = k.ActiveSequenceStride
	q.TrackOutputBlocks = k.TrackOutputBlocks
}

// bindSimKnobs registers, for kvrouter sim, the knobs that apply to a
// simulated fleet: not the shared-cache credit (the mock engines have no
// shared pool) nor output-block tracking (the simulator reports no
// generated tokens to the router).
func bindSimKnobs(fs *flag.FlagSet, rc *router.Config) {
	s, q := &rc.Scheduler, &rc.Sequences
	fs.Float64Var(&s.OverlapScoreCreditDecay, "kv-overlap-score-credit-decay", s.OverlapScoreCreditDecay, "shrink the cache credit of workers with more pending prefill than the least loaded (0: off)")
	fs.Float64Var(&s.DecodeActiveRequestWeight, "router-decode-active-request-weight", s.DecodeActiveRequestWeight, "cost in blocks added per running request")
	fs.Var(&boolPair{&s.TrackPrefillTokens, &q.TrackPrefillTokens}, "router-track-prefill-tokens", "count prompt tokens still to prefill in the load and the cost")
	fs.BoolVar(&q.AssumeKVReuse, "router-assume-kv-reuse", q.AssumeKVReuse, "count prompt blocks shared by running requests on a worker once")
	fs.IntVar(&q.ActiveSequenceStride, "router-active-sequence-stride", q.ActiveSequenceStride, "track one hash per this many prompt blocks of a running request")
}

// boolPair is a boolean flag setting two fields: the scheduler's and the
// ledger's copy of one option.
type boolPair [2]*bool

var _ flag.Value = (*boolPair)(nil)

func (b *boolPair) String() string {
	if b == nil || b[0] == nil {
		return "false"
	}
	return strconv.FormatBool(*b[0] && *b[1])
}

func (b *boolPair) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b[0], *b[1] = v, v
	return nil
}

// IsBoolFlag lets the flag be given without a value.
func (b *boolPair) IsBoolFlag() bool { return true }
