package vllm

import (
	"errors"
	"fmt"
)

// Sentinel errors. Parse errors wrap one of them; match with errors.Is.
var (
	// ErrMalformed reports bytes that are not a KV event batch, or an
	// event field of the wrong type.
	ErrMalformed = errors.New("malformed vLLM KV event payload")
	// ErrTooLarge reports a batch or event over the configured Limits.
	ErrTooLarge = errors.New("vLLM KV event over size limits")
)

// Reason says why the Decoder dropped an event. Every dropped event gets
// exactly one reason, so callers can count them per reason.
type Reason uint8

// Refusal reasons.
const (
	// ReasonMalformed: the event could not be read (wrong field types,
	// values out of range).
	ReasonMalformed Reason = iota + 1
	// ReasonUnknownType: the event's tag is not one we know.
	ReasonUnknownType
	// ReasonTooLarge: more blocks or tokens than Limits allow.
	ReasonTooLarge
	// ReasonBlockSize: block_size differs from the worker's configured
	// block size.
	ReasonBlockSize
	// ReasonTokenCount: len(token_ids) is not blocks × block_size.
	ReasonTokenCount
	// ReasonSelfReference: a stored block's hash equals its parent's.
	ReasonSelfReference
	// ReasonDuplicateHash: a stored event names the same hash twice.
	ReasonDuplicateHash
	// ReasonFiltered: the event belongs to a KV cache group other than the
	// main attention group (sliding window, mamba, ...). Not an error, but
	// counted so operators see it.
	ReasonFiltered
)

// Reasons lists every reason, for pre-registering metric labels.
var Reasons = []Reason{
	ReasonMalformed, ReasonUnknownType, ReasonTooLarge, ReasonBlockSize,
	ReasonTokenCount, ReasonSelfReference, ReasonDuplicateHash, ReasonFiltered,
}

// String returns the reason's metric label.
func (r Reason) String() string {
	switch r {
	case ReasonMalformed:
		return "malformed"
	case ReasonUnknownType:
		return "unknown_type"
	case ReasonTooLarge:
		return "too_large"
	case ReasonBlockSize:
		return "block_size"
	case ReasonTokenCount:
		return "token_count"
	case ReasonSelfReference:
		return "self_reference"
	case ReasonDuplicateHash:
		return "duplicate_hash"
	case ReasonFiltered:
		return "filtered_group"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Refusal is one event the Decoder dropped.
type Refusal struct {
	// Index is the event's position in the batch.
	Index int
	// Tag is the event's tag.
	Tag string
	// Reason is why it was dropped.
	Reason Reason
	// Detail is a human explanation ("block size 32 ≠ 16").
	Detail string
}

// String renders the refusal for logs.
func (r Refusal) String() string {
	return fmt.Sprintf("event %d (%s) refused: %s: %s", r.Index, r.Tag, r.Reason, r.Detail)
}
