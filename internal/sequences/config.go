package sequences

import (
	"errors"
	"fmt"
	"time"
)

// Config sets what the ledger counts.
type Config struct {
	// BlockSize is the KV block size in tokens, used to turn generated tokens
	// into output blocks and cached blocks into tokens. Default 16.
	BlockSize int
	// TrackActiveBlocks counts KV blocks held by running requests; off means
	// decode blocks are always 0. Default true.
	TrackActiveBlocks bool
	// TrackPrefillTokens counts prompt tokens still to prefill; off means
	// prefill tokens are always 0. Default true.
	TrackPrefillTokens bool
	// AssumeKVReuse deduplicates blocks shared by running requests on one
	// worker rank; off makes every request's blocks private (for engines that
	// do not share transferred blocks). Requests may override it. Default true.
	AssumeKVReuse bool
	// ActiveSequenceStride keeps one tracking hash per this many prompt
	// blocks, each counting for that many blocks. Default 1 (every block).
	ActiveSequenceStride int
	// TrackOutputBlocks grows a request's blocks as it generates tokens and
	// enables the expected-output-tokens fractional decay. Default false.
	TrackOutputBlocks bool
	// Expiry frees requests booked at least this long ago (a lost Free
	// must not leak load forever, and a generation may run for long
	// minutes); 0 disables expiry. Default 3600 s, as Dynamo's ledger.
	Expiry time.Duration
	// ExpirySweep is how often, at most, the lazy expiry sweep looks for
	// such requests: a request is freed between Expiry and Expiry +
	// ExpirySweep after it was booked (at the first AddRequest or Expire
	// call after that). Positive when Expiry is. Default 30 s.
	ExpirySweep time.Duration
}

// DefaultConfig returns the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		BlockSize:            16,
		TrackActiveBlocks:    true,
		TrackPrefillTokens:   true,
		AssumeKVReuse:        true,
		ActiveSequenceStride: 1,
		Expiry:               3600 * time.Second,
		ExpirySweep:          30 * time.Second,
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid sequences config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: block size %d must be positive", ErrConfig, c.BlockSize)
	case c.ActiveSequenceStride <= 0:
		return fmt.Errorf("%w: active sequence stride %d must be positive", ErrConfig, c.ActiveSequenceStride)
	case c.Expiry < 0:
		return fmt.Errorf("%w: expiry %v must not be negative", ErrConfig, c.Expiry)
	case c.ExpirySweep < 0 || c.Expiry > 0 && c.ExpirySweep == 0:
		return fmt.Errorf("%w: expiry sweep %v must be positive", ErrConfig, c.ExpirySweep)
	}
	return nil
}
