package scheduler

// Thresholds are the busy thresholds alone, as Config has them; the
// front door's admission queue uses a second set of them to tell when
// every worker is saturated (then requests wait instead of being routed).
type Thresholds struct {
	// ActiveDecodeBlocksThreshold: busy above this fraction of the KV
	// capacity held by running requests; 0 is off.
	ActiveDecodeBlocksThreshold float64
	// ActivePrefillTokensThreshold: busy above this many pending prefill
	// tokens; 0 is off.
	ActivePrefillTokensThreshold int
	// ActivePrefillTokensThresholdFrac: busy above this fraction of max
	// batched tokens pending prefill; 0 is off.
	ActivePrefillTokensThresholdFrac float64
}

// Thresholds returns the config's busy thresholds.
func (c Config) Thresholds() Thresholds {
	return Thresholds{ActiveDecodeBlocksThreshold: c.ActiveDecodeBlocksThreshold,
		ActivePrefillTokensThreshold: c.ActivePrefillTokensThreshold, ActivePrefillTokensThresholdFrac: c.ActivePrefillTokensThresholdFrac}
}

// On reports whether any threshold is set.
func (t Thresholds) On() bool {
	return t.ActiveDecodeBlocksThreshold > 0 || t.ActivePrefillTokensThreshold > 0 || t.ActivePrefillTokensThresholdFrac > 0
}

// Validate reports a threshold that is not a finite, non-negative number.
func (t Thresholds) Validate() error {
	c := DefaultConfig()
	c.ActiveDecodeBlocksThreshold, c.ActivePrefillTokensThreshold, c.ActivePrefillTokensThresholdFrac =
		t.ActiveDecodeBlocksThreshold, t.ActivePrefillTokensThreshold, t.ActivePrefillTokensThresholdFrac
	return c.Validate()
}

// Busy says which threshold the candidate is over (Eligible when none).
func (t Thresholds) Busy(c *Candidate) Exclusion {
	switch {
	case t.ActiveDecodeBlocksThreshold > 0 && c.KVCapacityBlocks > 0 &&
		c.ActiveBlocks > t.ActiveDecodeBlocksThreshold*float64(c.KVCapacityBlocks):
		return BusyDecodeBlocks
	case t.ActivePrefillTokensThreshold > 0 && c.ActivePrefillTokens > t.ActivePrefillTokensThreshold:
		return BusyPrefillTokens
	case t.ActivePrefillTokensThresholdFrac > 0 && c.MaxBatchedTokens > 0 &&
		float64(c.ActivePrefillTokens) > t.ActivePrefillTokensThresholdFrac*float64(c.MaxBatchedTokens):
		return BusyPrefillFrac
	}
	return Eligible
}
