package router

import (
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
)

// Load is a worker rank's current load (Loads), as the active-sequence
// ledger counts it.
type Load = sequences.Load

// Overlap is a candidate's cached prefix per storage tier, as a decision's
// explanation rows carry it.
type Overlap = scheduler.Overlap

// Explanation is one candidate's row in a decision's explanation.
type Explanation = scheduler.Explanation

// Mode is how a worker's cache is known.
type Mode uint8

// Modes.
const (
	// Exact workers publish KV events; the index follows them.
	Exact Mode = iota
	// Approximate workers publish nothing; the router records its own
	// decisions in the index with a TTL.
	Approximate
)

// WorkerInfo describes a worker for AddWorker.
type WorkerInfo struct {
	// ID is the worker id.
	ID kvevent.WorkerID
	// BlockSize is the worker's KV block size; it must equal the router's.
	BlockSize int
	// DPStart is the first data-parallel rank; DPSize the number of ranks
	// (0 means 1).
	DPStart, DPSize int
	// KVCapacityBlocks is the KV cache size of each rank in blocks; 0 means
	// unknown.
	KVCapacityBlocks int
	// MaxBatchedTokens is the engine's max batched tokens; 0 means unknown.
	MaxBatchedTokens int
	// Mode says whether the worker publishes KV events.
	Mode Mode
	// Role is the worker's part in a disaggregated fleet.
	Role Role
}

// Request is one request to route.
type Request struct {
	// ID identifies the request until Free; it must be unique among running
	// requests.
	ID string
	// Tokens are the prompt's token ids.
	Tokens []uint32
	// Model names the pool that routes the request (Pools; "" is the
	// default model). A Router ignores it.
	Model string
	// LoRAName and Namespace salt the block hashes (kvhash).
	LoRAName, Namespace string
	// RecordDecision records the booked decision in the index as an
	// approximate worker's is (with the approximate TTL), whatever the
	// chosen worker's mode: for prompts no engine event can confirm
	// (routed by a hash of their text).
	RecordDecision bool
	// MM holds per-block multimodal hashes (kvhash.Options.MM).
	MM [][]uint64
	// ExpectedOutputTokens is the expected output length; 0 = unknown.
	ExpectedOutputTokens int
	// Overrides replaces scheduler knobs for this request.
	Overrides scheduler.Overrides
	// Reuse overrides the ledger's assume_kv_reuse for this request.
	Reuse sequences.Reuse
	// AllowedWorkers, when non-empty, restricts the candidates.
	AllowedWorkers []kvevent.WorkerID
	// PinnedWorker, when HasPinned, is the only candidate worker.
	PinnedWorker kvevent.WorkerID
	// HasPinned says whether PinnedWorker is set.
	HasPinned bool
	// DPRankStart and DPRankSize restrict dp ranks; size 0 = all.
	DPRankStart, DPRankSize int
	// Phase is the hop being routed (pd.go); PhaseWhole by default.
	Phase Phase
	// Explanation, when its capacity suffices, is the storage the
	// decision's Candidates are written into instead of fresh memory:
	// pass back the Candidates of a Decision you are done with. A fleet
	// of 1,024 worker ranks makes a 140 KB explanation per decision.
	Explanation []Explanation
}

// Decision is a routing decision with its explanation.
type Decision struct {
	scheduler.Decision
	// RequestID is the routed request's id.
	RequestID string
	// InputTokens is the prompt length.
	InputTokens int
	// Blocks is the number of full blocks the prompt has.
	Blocks int
	// OverlapBlocks is the chosen worker's device overlap in blocks.
	OverlapBlocks int
	// PrefillTokens is the prefill booked on the chosen worker.
	PrefillTokens int
	// Booked is true when Route booked the request (false for Plan).
	Booked bool
	// Phase is the hop decided.
	Phase Phase
}

// LifecycleKind is what a lifecycle event does.
type LifecycleKind uint8

// Lifecycle kinds.
const (
	// AddRequest books a request on a worker rank.
	AddRequest LifecycleKind = iota + 1
	// MarkPrefillCompleted says the request's first token came out.
	MarkPrefillCompleted
	// Free ends the request.
	Free
)

// String names the kind.
func (k LifecycleKind) String() string {
	switch k {
	case AddRequest:
		return "add_request"
	case MarkPrefillCompleted:
		return "mark_prefill_completed"
	case Free:
		return "free"
	}
	return "unknown"
}

// LifecycleEvent is a change to the active sequences, shared between
// router replicas. Only AddRequest fills the fields after Worker.
type LifecycleEvent struct {
	// Kind says what happened.
	Kind LifecycleKind
	// RouterID is the router that produced the event.
	RouterID uint64
	// RequestID is the request.
	RequestID string
	// Model names the model pool the event belongs to (see Pools); ""
	// is the default model's, and a lone Router leaves it empty.
	Model string
	// Worker is the worker rank the request is booked on.
	Worker kvevent.WorkerRank
	// BlockHashes are the prompt's block sequence hashes (AddRequest).
	BlockHashes []uint64
	// PrefillTokens is the booked prefill (AddRequest).
	PrefillTokens int
	// ExpectedOutputTokens is the expected output length (AddRequest).
	ExpectedOutputTokens int
	// Private says the request's blocks are not shared (assume_kv_reuse off).
	Private bool
}

// Observer receives the router's own lifecycle events, in order, on the
// caller's goroutine and under the router's lock: it must return quickly
// (enqueue, drop when full) and must not call the Router. The event's
// slices are the observer's to keep.
type Observer func(LifecycleEvent)

// Stats counts the router's unusual events.
type Stats struct {
	// Routed counts requests booked by Route.
	Routed uint64
	// Rejected counts Route calls that failed (no candidates, all busy,
	// bad request); a failed Plan is not counted.
	Rejected uint64
	// RemoteApplied counts lifecycle events applied from other routers.
	RemoteApplied uint64
	// RemoteDropped counts lifecycle events from other routers that could
	// not be applied (unknown worker or request, duplicate id).
	RemoteDropped uint64
	// RemoteUnknownModel counts other routers' lifecycle events for a
	// model no pool serves (Pools only), dropped (and in RemoteDropped).
	RemoteUnknownModel uint64
	// IndexErrors counts writes the index refused synchronously.
	IndexErrors uint64
	// Observations counts samples Observe folded into time models.
	Observations uint64
	// Sequences holds the ledger's counters (unknown ids, expired).
	Sequences sequences.Stats
}
