package kvevent

import (
	"fmt"
	"strings"
)

// WorkerID identifies a worker (an engine instance) across the fleet.
type WorkerID uint64

// DPRank is a data-parallel rank inside one worker; 0 when the worker has
// no data parallelism.
type DPRank uint32

// WorkerRank is the unit the index, the ledger and the scheduler work on:
// one data-parallel rank (Rank) of one worker (ID, the worker's id).
type WorkerRank struct {
	ID   WorkerID
	Rank DPRank
}

// String renders the worker rank as "id/rank".
func (w WorkerRank) String() string { return fmt.Sprintf("%d/%d", w.ID, w.Rank) }

// Kind is what an event does.
type Kind uint8

// The three event kinds.
const (
	// Stored adds blocks below a parent (or at the root).
	Stored Kind = iota + 1
	// Removed drops blocks by engine hash.
	Removed
	// Cleared drops every block of the emitting worker rank.
	Cleared
)

// String names the kind as Dynamo's serde does: stored, removed, cleared.
func (k Kind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Block is one stored block: the engine's opaque id for it and the local
// hash of its token ids computed by the router.
type Block struct {
	// EngineHash is the engine's id for the block (its sequence hash in the
	// engine's own scheme); used for parent lookup and removal only.
	EngineHash uint64
	// LocalHash is kvhash's local hash of the block's tokens.
	LocalHash uint64
}

// Event is one KV cache event of one worker rank.
//
// For Stored, Blocks lists the new blocks in chain order, the first one a
// child of Parent (or of the root when HasParent is false). For Removed,
// Removed lists engine hashes. Cleared carries nothing else.
type Event struct {
	// Worker is the emitting worker rank.
	Worker WorkerRank
	// Tier is the storage tier the blocks live on.
	Tier Tier
	// ID is the publisher's event id, monotonic per worker rank; 0 when the
	// source does not number its events.
	ID uint64
	// Kind says what the event does.
	Kind Kind
	// HasParent is true when the first stored block has a parent.
	HasParent bool
	// Parent is the engine hash of the first stored block's parent.
	Parent uint64
	// Blocks are the stored blocks (Stored only).
	Blocks []Block
	// Removed are the engine hashes of removed blocks (Removed only).
	Removed []uint64
	// LoRAName is the LoRA adapter the stored blocks were computed with,
	// when the source says (vLLM's lora_name); "" otherwise. Their local
	// hashes are already salted with it: this only tells the router which
	// adapters the worker has loaded.
	LoRAName string
}

// Tier is a KV cache storage tier.
type Tier uint8

// Storage tiers, fastest first. The zero value is TierDevice.
const (
	// TierDevice is accelerator memory (GPU HBM, "G1").
	TierDevice Tier = iota
	// TierHostPinned is host memory ("G2").
	TierHostPinned
	// TierDisk is local disk or NVMe ("G3").
	TierDisk
	// TierExternal is a shared or remote cache ("G4").
	TierExternal
)

// NumTiers is the number of storage tiers.
const NumTiers = 4

// String returns Dynamo's serde name of the tier: device, host_pinned, disk,
// external.
func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHostPinned:
		return "host_pinned"
	case TierDisk:
		return "disk"
	case TierExternal:
		return "external"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// Medium returns the canonical engine medium string for the tier: empty for
// device, then CPU_PINNED, DISK and EXTERNAL.
func (t Tier) Medium() string {
	switch t {
	case TierHostPinned:
		return "CPU_PINNED"
	case TierDisk:
		return "DISK"
	case TierExternal:
		return "EXTERNAL"
	}
	return ""
}

// ParseTier parses a tier's serde name (as String returns it).
func ParseTier(s string) (Tier, error) {
	for t := TierDevice; t < NumTiers; t++ {
		if t.String() == s {
			return t, nil
		}
	}
	return TierDevice, fmt.Errorf("unknown storage tier %q", s)
}

// TierFromMedium maps an engine's medium string to a tier, case-insensitively:
// GPU and DEVICE are device; CPU, CPU_PINNED and CPU_TIER1 host memory;
// CPU_TIER2, DISK, NVME and STORAGE disk; EXTERNAL, NETWORK, REMOTE and SHARED
// external. Empty and unknown strings mean device, as in Dynamo.
func TierFromMedium(medium string) Tier {
	switch strings.ToUpper(medium) {
	case "CPU", "CPU_PINNED", "CPU_TIER1":
		return TierHostPinned
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return TierDisk
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return TierExternal
	}
	return TierDevice
}
