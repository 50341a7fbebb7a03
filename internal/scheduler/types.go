package scheduler

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Overlap is how many of the request's leading blocks a worker rank holds,
// per storage tier.
type Overlap struct {
	// Device is the number of leading blocks in accelerator memory.
	Device int
	// Host is the number of further blocks, past the device prefix, in host
	// memory.
	Host int
	// Disk is the number of further blocks, past the device and host
	// prefixes, on disk or external storage.
	Disk int
	// Shared is the number of further blocks, past the device prefix, in a
	// shared cache pool.
	Shared int
}

// Candidate is what the scheduler knows about one worker rank for one
// request.
type Candidate struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// Down excludes the worker rank (state DOWN).
	Down bool
	// Overlap is the request's cached prefix on the worker rank per tier.
	Overlap Overlap
	// ActivePrefillTokens is the prompt load already booked on it.
	ActivePrefillTokens int
	// PrefillElapsed is how long the worker rank has been computing that
	// booked prefill since it last finished one (the ledger's
	// PrefillSince, up to the decision): kv-time credits it against the
	// queue. 0 when unknown or nothing is booked.
	PrefillElapsed time.Duration
	// ITLExposure is the ledger's Load.ITLExposure: Σ 1/(expected output
	// − 1) over its running requests.
	ITLExposure float64
	// ActiveBlocks is the KV blocks held by its running requests (busy check).
	ActiveBlocks float64
	// DecodeBlocks is ActiveBlocks plus the blocks the request would add
	// (the ledger's potential decode blocks).
	DecodeBlocks float64
	// ActiveRequests is the number of running requests.
	ActiveRequests int
	// KVCapacityBlocks is the worker rank's KV cache size in blocks; 0 means
	// unknown (the decode busy threshold is then not checked).
	KVCapacityBlocks int
	// MaxBatchedTokens is the engine's max batched tokens; 0 means unknown.
	MaxBatchedTokens int
}

// Overrides are per-request replacements of Config knobs; nil keeps the
// configured value.
type Overrides struct {
	// OverlapScoreCredit replaces Config.OverlapScoreCredit.
	OverlapScoreCredit *float64
	// PrefillLoadScale replaces Config.PrefillLoadScale.
	PrefillLoadScale *float64
	// Temperature replaces Config.Temperature.
	Temperature *float64
}

// Request is what the scheduler needs to know about the request itself.
type Request struct {
	// InputTokens is the prompt length in tokens.
	InputTokens int
	// BlockSize is the KV block size in tokens; must be positive.
	BlockSize int
	// Overrides replaces knobs for this request.
	Overrides Overrides
	// AllowedWorkers, when non-empty, restricts candidates to these workers.
	AllowedWorkers []kvevent.WorkerID
	// PinnedWorker, when HasPinned, restricts candidates to this worker.
	PinnedWorker kvevent.WorkerID
	// HasPinned says whether PinnedWorker is set.
	HasPinned bool
	// DPRankStart and DPRankSize restrict dp ranks to
	// [DPRankStart, DPRankStart+DPRankSize); size 0 means every rank.
	DPRankStart, DPRankSize int
	// Now is the decision's time, for policies whose models age (kv-time);
	// the zero value ages nothing.
	Now time.Time
	// Hop is the part of a disaggregated request being routed (hop.go);
	// HopWhole by default.
	Hop Hop
}

// Exclusion says why a candidate was not eligible; the empty value means it
// was.
type Exclusion string

// Exclusion reasons.
const (
	// Eligible means the candidate was not excluded.
	Eligible Exclusion = ""
	// ExcludedDown means the worker is in state DOWN.
	ExcludedDown Exclusion = "down"
	// ExcludedNotAllow means the request's allow-list does not name it.
	ExcludedNotAllow Exclusion = "not in allow-list"
	// ExcludedNotPinned means the request is pinned to another worker.
	ExcludedNotPinned Exclusion = "not the pinned worker"
	// ExcludedDPRank means the rank is outside the request's dp range.
	ExcludedDPRank Exclusion = "dp rank out of range"
	// BusyDecodeBlocks means active blocks exceed the capacity fraction.
	BusyDecodeBlocks Exclusion = "busy: active decode blocks over threshold"
	// BusyPrefillTokens means pending prefill exceeds the absolute limit.
	BusyPrefillTokens Exclusion = "busy: active prefill tokens over threshold"
	// BusyPrefillFrac means pending prefill exceeds the fraction of max
	// batched tokens.
	BusyPrefillFrac Exclusion = "busy: active prefill tokens over fraction of max batched tokens"
)

// Explanation is one candidate's row in a decision.
type Explanation struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// Excluded is why the candidate was not eligible (empty if it was).
	Excluded Exclusion
	// Overlap is the cached prefix per tier.
	Overlap Overlap
	// RawPrefillBlocks is (active prefill tokens + input tokens) / block size.
	RawPrefillBlocks float64
	// CreditBlocks is the overlap credit subtracted from RawPrefillBlocks.
	CreditBlocks float64
	// AdjustedPrefillBlocks is RawPrefillBlocks − CreditBlocks, floored at
	// 0 when Config.PrefillClamp is on (the default); negative otherwise
	// when the credit exceeds the raw prefill.
	AdjustedPrefillBlocks float64
	// DecodeBlocks is the potential decode blocks.
	DecodeBlocks float64
	// ActiveBlocks is the blocks held by running requests, before this one.
	ActiveBlocks float64
	// ActivePrefillTokens is the prompt load already booked.
	ActivePrefillTokens int
	// PrefillElapsed is the candidate's PrefillElapsed.
	PrefillElapsed time.Duration
	// ActiveRequests is the number of running requests.
	ActiveRequests int
	// Cost is the kv cost (computed for every eligible row, whatever the
	// policy).
	Cost float64
	// Probability is the chance the row had of being chosen when sampling
	// (temperature > 0, random policy); 0 otherwise.
	Probability float64
	// Prediction is the kv-time policy's estimate in seconds (zero under
	// other policies).
	Prediction Prediction
}

// Decision is the scheduler's answer.
type Decision struct {
	// Worker is the chosen worker rank.
	Worker kvevent.WorkerRank
	// Chosen is the index of the chosen row in Candidates.
	Chosen int
	// Policy names the policy that chose.
	Policy string
	// Temperature is the temperature the kv policy used.
	Temperature float64
	// Candidates explains every candidate, in input order.
	Candidates []Explanation
}

// ChosenRow returns the chosen candidate's row.
func (d Decision) ChosenRow() Explanation { return d.Candidates[d.Chosen] }
