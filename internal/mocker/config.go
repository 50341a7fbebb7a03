package mocker

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/timemodel"
)

// Config describes one engine rank. Every field has the default given by
// DefaultConfig; Validate must pass before NewEngine accepts it.
type Config struct {
	// BlockSize is the number of tokens per KV block (--block-size).
	// Default 64.
	BlockSize int
	// NumGPUBlocks is the number of device KV blocks of the rank
	// (--num-gpu-blocks-override). Default 16384.
	NumGPUBlocks int
	// NumCPUBlocks is the number of host-memory blocks of the offload tier
	// (--num-cpu-blocks); 0 turns the tier off. Default 0.
	NumCPUBlocks int
	// MaxNumSeqs caps the requests running at once (--max-num-seqs).
	// Default 256.
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens computed in one step, prefill
	// chunks and decodes together (--max-num-batched-tokens). Default 8192.
	MaxNumBatchedTokens int
	// LongPrefillTokenThreshold caps the tokens one request computes in a
	// step, in tokens (--long-prefill-token-threshold, vLLM's
	// long_prefill_token_threshold): a request with more than this many
	// tokens still to compute, running or just admitted, computes only
	// this many, so one long prompt cannot fill a step and a request
	// arriving behind it joins the next step. Decodes (one token) are
	// never capped. 0 turns the cap off. Default 0.
	LongPrefillTokenThreshold int
	// Watermark is the fraction of device blocks kept free when admitting a
	// waiting request (vLLM semantics). Default 0.01.
	Watermark float64
	// EnablePrefixCaching turns prefix caching (and so KV events) on
	// (--[no-]enable-prefix-caching). Default true.
	EnablePrefixCaching bool
	// SpeedupRatio divides every modelled duration (--speedup-ratio).
	// Default 1.
	SpeedupRatio float64
	// DecodeSpeedupRatio further divides decode-step durations
	// (--decode-speedup-ratio). Default 1.
	DecodeSpeedupRatio float64
	// KVTransferBandwidth is the host-to-device bandwidth used to bring a
	// block back from the CPU tier, in bytes per second
	// (--kv-transfer-bandwidth, given in GB/s on the command line).
	// Default 64e9.
	KVTransferBandwidth float64
	// KVBytesPerToken is the KV cache size of one token in bytes
	// (--kv-bytes-per-token). Default 114688 (Qwen3-0.6B in bf16: 28 layers
	// × 2 × 8 KV heads × 128 head dim × 2 bytes).
	KVBytesPerToken int
	// HashSeed salts the engine's own block hashes (the opaque ids it
	// publishes), so that they never equal the router's hashes and differ
	// between engines given different seeds. Default 0x6d6f636b6572 ("mocker").
	HashSeed uint64
}

// DefaultConfig returns the configuration of a default engine rank, the
// same defaults as Dynamo's mocker.
func DefaultConfig() Config {
	return Config{
		BlockSize:           64,
		NumGPUBlocks:        16384,
		NumCPUBlocks:        0,
		MaxNumSeqs:          256,
		MaxNumBatchedTokens: 8192,
		Watermark:           0.01,
		EnablePrefixCaching: true,
		SpeedupRatio:        1,
		DecodeSpeedupRatio:  1,
		KVTransferBandwidth: timemodel.DefaultTransferBandwidth,
		KVBytesPerToken:     timemodel.DefaultKVBytesPerToken,
		HashSeed:            0x6d6f636b6572,
	}
}

// ErrConfig wraps every configuration validation failure.
var ErrConfig = errors.New("invalid mocker config")

// Validate checks every field once; NewEngine calls it.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	switch {
	case c.BlockSize <= 0 || c.BlockSize > 1<<16:
		return bad("block size %d out of range [1, 65536]", c.BlockSize)
	case c.NumGPUBlocks <= 1 || c.NumGPUBlocks > 1<<30:
		return bad("num GPU blocks %d out of range [2, 2^30]", c.NumGPUBlocks)
	case c.NumCPUBlocks < 0 || c.NumCPUBlocks > 1<<30:
		return bad("num CPU blocks %d out of range [0, 2^30]", c.NumCPUBlocks)
	case c.MaxNumSeqs <= 0:
		return bad("max num seqs %d must be positive", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return bad("max num batched tokens %d must be positive", c.MaxNumBatchedTokens)
	case c.LongPrefillTokenThreshold < 0:
		return bad("long prefill token threshold %d must not be negative (0: off)", c.LongPrefillTokenThreshold)
	case !(c.Watermark >= 0 && c.Watermark < 1):
		return bad("watermark %v out of range [0, 1)", c.Watermark)
	case !(c.SpeedupRatio > 0):
		return bad("speedup ratio %v must be positive", c.SpeedupRatio)
	case !(c.DecodeSpeedupRatio > 0):
		return bad("decode speedup ratio %v must be positive", c.DecodeSpeedupRatio)
	case !(c.KVTransferBandwidth > 0):
		return bad("KV transfer bandwidth %v must be positive", c.KVTransferBandwidth)
	case c.KVBytesPerToken < 0:
		return bad("KV bytes per token %d must not be negative", c.KVBytesPerToken)
	}
	return nil
}

// watermarkBlocks is the number of device blocks admission keeps free.
func (c Config) watermarkBlocks() int { return int(c.Watermark * float64(c.NumGPUBlocks)) }
