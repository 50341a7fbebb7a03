package scheduler

import (
	"errors"
	"fmt"
	"math"
)

// Config holds the cost knobs and busy thresholds.
type Config struct {
	// OverlapScoreCredit is the credit, in blocks, per device block already
	// cached. Default 1.0.
	OverlapScoreCredit float64
	// OverlapScoreCreditDecay shrinks the device credit of workers with more
	// pending prefill than the least busy candidate (rational decay); 0 turns
	// it off. Default 0.
	OverlapScoreCreditDecay float64
	// PrefillLoadScale weighs adjusted prefill blocks against decode blocks.
	// Default 1.0.
	PrefillLoadScale float64
	// HostCacheHitWeight is the credit per block held in host memory beyond
	// the device prefix. Default 0.75.
	HostCacheHitWeight float64
	// DiskCacheHitWeight is the credit per block held on disk or external
	// storage beyond the device prefix. Default 0.25.
	DiskCacheHitWeight float64
	// SharedCacheMultiplier is the credit per block held in a shared cache
	// pool beyond the device prefix. Default 0.
	SharedCacheMultiplier float64
	// DecodeActiveRequestWeight adds this many blocks of cost per running
	// request. Default 0.
	DecodeActiveRequestWeight float64
	// Temperature is the softmax temperature; 0 picks the lowest cost.
	// Default 0.
	Temperature float64
	// TrackPrefillTokens includes prompt load in the cost; off makes raw
	// prefill blocks 0. Default true.
	TrackPrefillTokens bool
	// PrefillClamp floors the adjusted prefill at zero, as design §1 has it:
	// max(raw − credit, 0). Off, the adjusted prefill may go negative, so a
	// longer cached prefix keeps lowering the cost even where the credit
	// already covers the prompt and its queue (with a high
	// OverlapScoreCredit the clamp makes a full hit and a partial one tie at
	// zero). Default true.
	PrefillClamp bool
	// ActiveDecodeBlocksThreshold removes candidates whose active blocks
	// exceed this fraction of their KV capacity; 0 is off. Default 0.
	ActiveDecodeBlocksThreshold float64
	// ActivePrefillTokensThreshold removes candidates with more pending
	// prefill tokens than this; 0 is off. Default 0.
	ActivePrefillTokensThreshold int
	// ActivePrefillTokensThresholdFrac removes candidates whose pending
	// prefill tokens exceed this fraction of their max batched tokens; 0 is
	// off. Default 0.
	ActivePrefillTokensThresholdFrac float64
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		OverlapScoreCredit: 1.0,
		PrefillLoadScale:   1.0,
		HostCacheHitWeight: 0.75,
		DiskCacheHitWeight: 0.25,
		TrackPrefillTokens: true,
		PrefillClamp:       true,
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid scheduler config")

// Validate reports the first invalid field: every knob must be a finite,
// non-negative number.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"overlap_score_credit", c.OverlapScoreCredit},
		{"overlap_score_credit_decay", c.OverlapScoreCreditDecay},
		{"prefill_load_scale", c.PrefillLoadScale},
		{"host_cache_hit_weight", c.HostCacheHitWeight},
		{"disk_cache_hit_weight", c.DiskCacheHitWeight},
		{"shared_cache_multiplier", c.SharedCacheMultiplier},
		{"decode_active_request_weight", c.DecodeActiveRequestWeight},
		{"temperature", c.Temperature},
		{"active_decode_blocks_threshold", c.ActiveDecodeBlocksThreshold},
		{"active_prefill_tokens_threshold", float64(c.ActivePrefillTokensThreshold)},
		{"active_prefill_tokens_threshold_frac", c.ActivePrefillTokensThresholdFrac},
	} {
		if !validKnob(f.v) {
			return fmt.Errorf("%w: %s = %v must be finite and >= 0", ErrConfig, f.name, f.v)
		}
	}
	return nil
}

func validKnob(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
