package vllm

import (
	"encoding/binary"
	"fmt"
)

// HashForm says how an engine block hash is written on the wire.
type HashForm uint8

// Hash forms. The zero value, HashNil, is an absent hash (msgpack nil).
const (
	// HashNil is no hash: a nil parent_block_hash.
	HashNil HashForm = iota
	// HashUint is a non-negative msgpack integer (vLLM's default).
	HashUint
	// HashInt is a signed msgpack integer (SGLang, vLLM before 0.10.2);
	// Value holds its two's-complement bit pattern.
	HashInt
	// HashBytes is a msgpack bin (vLLM with
	// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: the 32-byte digest).
	HashBytes
)

// Hash is an engine block hash as the engine wrote it. The zero value is nil.
type Hash struct {
	// Form is the wire form.
	Form HashForm
	// Value is the integer's 64-bit pattern (HashUint, HashInt).
	Value uint64
	// Bytes is the digest (HashBytes).
	Bytes []byte
}

// UintHash returns an unsigned integer hash, as vLLM publishes by default.
func UintHash(v uint64) Hash { return Hash{Form: HashUint, Value: v} }

// IntHash returns a signed integer hash, as SGLang publishes.
func IntHash(v int64) Hash { return Hash{Form: HashInt, Value: uint64(v)} }

// BytesHash returns a bin hash (vLLM's raw digest form).
func BytesHash(b []byte) Hash { return Hash{Form: HashBytes, Bytes: b} }

// IsNil reports whether the hash is absent.
func (h Hash) IsNil() bool { return h.Form == HashNil }

// ID normalises the hash to the 64-bit engine id the router keys blocks by:
// an integer's bit pattern, or the last 8 bytes of a digest read big-endian
// (left-padded with zeros when shorter). This equals vLLM's integer form of
// the same digest, int.from_bytes(digest, "big") & (2^64-1).
func (h Hash) ID() uint64 {
	if h.Form != HashBytes {
		return h.Value
	}
	b := h.Bytes
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b[len(b)-8:])
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// String renders the hash for logs and test failures.
func (h Hash) String() string {
	switch h.Form {
	case HashNil:
		return "nil"
	case HashUint:
		return fmt.Sprintf("%d", h.Value)
	case HashInt:
		return fmt.Sprintf("%d", int64(h.Value))
	case HashBytes:
		return fmt.Sprintf("hex:%x", h.Bytes)
	}
	return fmt.Sprintf("hash(form %d)", h.Form)
}
