package vllm

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is how events are written inside a batch.
type Encoding uint8

// The two event encodings vLLM has used.
const (
	// EncodingMap writes tagged maps {"type": "BlockStored", ...}, fields
	// with a default omitted when equal to it: vLLM after mid-2026
	// (vllm-project/vllm#42892).
	EncodingMap Encoding = iota
	// EncodingArray writes tagged arrays ["BlockStored", f1, ...] with
	// every field of the Schema, defaults as nil: vLLM ≤ v0.23, SGLang.
	EncodingArray
)

// String names the encoding as the mock engine's flags do: map, array.
func (e Encoding) String() string {
	if e == EncodingArray {
		return "array"
	}
	return "map"
}

// ParseEncoding parses "map" or "array".
func ParseEncoding(s string) (Encoding, error) {
	switch s {
	case "map":
		return EncodingMap, nil
	case "array":
		return EncodingArray, nil
	}
	return EncodingMap, fmt.Errorf("unknown vLLM event encoding %q (want map or array)", s)
}

// Schema is the field set of the tagged-array encoding, one per vLLM era.
// Each era appended fields to the previous one.
type Schema uint8

// Array field sets, oldest first. The zero value means SchemaSpecKind.
const (
	// SchemaV09 is vLLM v0.9.0: BlockStored[hashes, parent, tokens,
	// block_size, lora_id], BlockRemoved[hashes], batch [ts, events].
	SchemaV09 Schema = iota + 1
	// SchemaMedium adds medium (and the batch's dp rank); SGLang's form.
	SchemaMedium
	// SchemaLoRAName adds lora_name.
	SchemaLoRAName
	// SchemaExtraKeys adds extra_keys.
	SchemaExtraKeys
	// SchemaGroupIdx adds group_idx (to BlockRemoved too).
	SchemaGroupIdx
	// SchemaSpecKind adds kv_cache_spec_kind and kv_cache_spec_sliding_window.
	SchemaSpecKind
)

var schemaNames = map[Schema]string{SchemaV09: "v0.9", SchemaMedium: "medium", SchemaLoRAName: "lora_name",
	SchemaExtraKeys: "extra_keys", SchemaGroupIdx: "group_idx", SchemaSpecKind: "spec_kind"}

// String names the schema as the sample files do (v0.9, medium, ...).
func (s Schema) String() string {
	if n, ok := schemaNames[s]; ok {
		return n
	}
	return fmt.Sprintf("schema(%d)", uint8(s))
}

// ParseSchema parses a schema name as String prints it.
func ParseSchema(name string) (Schema, error) {
	for s, n := range schemaNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown vLLM array schema %q", name)
}

// Format says how Encode writes a batch.
type Format struct {
	// Encoding of the events.
	Encoding Encoding
	// Schema is the array field set (EncodingArray only); zero means the
	// newest, SchemaSpecKind.
	Schema Schema
}

func (f Format) schema() Schema {
	if f.Schema == 0 {
		return SchemaSpecKind
	}
	return f.Schema
}

// storedFields and removedFields are the array field counts (after the
// tag) per schema.
func storedFields(s Schema) int {
	return map[Schema]int{SchemaV09: 5, SchemaMedium: 6, SchemaLoRAName: 7, SchemaExtraKeys: 8,
		SchemaGroupIdx: 9, SchemaSpecKind: 11}[s]
}

func removedFields(s Schema) int {
	switch {
	case s == SchemaV09:
		return 1
	case s < SchemaGroupIdx:
		return 2
	}
	return 3
}

// Encoder writes batches as msgspec does. It reuses its buffer; it is not
// safe for concurrent use.
type Encoder struct {
	f   Format
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// NewEncoder returns an encoder for the format.
func NewEncoder(f Format) *Encoder {
	e := &Encoder{f: f}
	e.enc = msgpack.NewEncoder(&e.buf)
	return e
}

// Encode returns the payload of one batch as a new slice. Values the format
// cannot hold (a field the array schema lacks) are left out.
func Encode(b RawBatch, f Format) ([]byte, error) {
	return NewEncoder(f).Encode(b)
}

// Encode returns the payload of one batch as a new slice.
func (e *Encoder) Encode(b RawBatch) ([]byte, error) {
	e.buf.Reset()
	if err := e.batch(b); err != nil {
		return nil, fmt.Errorf("encoding vLLM event batch: %w", err)
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

func (e *Encoder) batch(b RawBatch) error {
	m := e.enc
	s := e.f.schema()
	n := 3
	if e.f.Encoding == EncodingArray && s == SchemaV09 {
		n = 2
	}
	_ = m.EncodeArrayLen(n)
	_ = m.EncodeFloat64(b.TS)
	_ = m.EncodeArrayLen(len(b.Events))
	for _, ev := range b.Events {
		var err error
		if e.f.Encoding == EncodingArray {
			err = e.arrayEvent(ev, s)
		} else {
			err = e.mapEvent(ev)
		}
		if err != nil {
			return err
		}
	}
	if n == 3 {
		e.optInt(b.DPRank)
	}
	return nil
}

func (e *Encoder) arrayEvent(ev RawEvent, s Schema) error {
	m := e.enc
	switch v := ev.(type) {
	case BlockStored:
		n := storedFields(s)
		_ = m.EncodeArrayLen(n + 1)
		_ = m.EncodeString(v.Tag())
		e.hashes(v.BlockHashes)
		e.hash(v.ParentBlockHash)
		e.tokens(v.TokenIDs, v.Bigrams)
		_ = m.EncodeInt(v.BlockSize)
		e.optInt(v.LoRAID)
		if n >= 6 {
			e.optStr(v.Medium)
		}
		if n >= 7 {
			e.optStr(v.LoRAName)
		}
		if n >= 8 {
			if err := e.extraKeys(v.ExtraKeys); err != nil {
				return err
			}
		}
		if n >= 9 {
			e.optInt(v.GroupIdx)
		}
		if n >= 11 {
			e.optStr(v.KVCacheSpecKind)
			e.optInt(v.KVCacheSpecSlidingWindow)
		}
	case BlockRemoved:
		n := removedFields(s)
		_ = m.EncodeArrayLen(n + 1)
		_ = m.EncodeString(v.Tag())
		e.hashes(v.BlockHashes)
		if n >= 2 {
			e.optStr(v.Medium)
		}
		if n >= 3 {
			e.optInt(v.GroupIdx)
		}
	case AllBlocksCleared:
		_ = m.EncodeArrayLen(1)
		_ = m.EncodeString(v.Tag())
	default:
		return fmt.Errorf("cannot encode event %T", ev)
	}
	return nil
}

func (e *Encoder) mapEvent(ev RawEvent) error {
	m := e.enc
	switch v := ev.(type) {
	case BlockStored:
		n := 8
		for _, set := range []bool{v.ExtraKeys != nil, v.GroupIdx != nil, v.KVCacheSpecKind != nil,
			v.KVCacheSpecSlidingWindow != nil, v.CacheSalt != nil} {
			if set {
				n++
			}
		}
		_ = m.EncodeMapLen(n)
		e.key("type")
		_ = m.EncodeString(v.Tag())
		e.key("block_hashes")
		e.hashes(v.BlockHashes)
		e.key("parent_block_hash")
		e.hash(v.ParentBlockHash)
		e.key("token_ids")
		e.tokens(v.TokenIDs, v.Bigrams)
		e.key("block_size")
		_ = m.EncodeInt(v.BlockSize)
		e.key("lora_id")
		e.optInt(v.LoRAID)
		e.key("medium")
		e.optStr(v.Medium)
		e.key("lora_name")
		e.optStr(v.LoRAName)
		if v.ExtraKeys != nil {
			e.key("extra_keys")
			if err := e.extraKeys(v.ExtraKeys); err != nil {
				return err
			}
		}
		if v.GroupIdx != nil {
			e.key("group_idx")
			e.optInt(v.GroupIdx)
		}
		if v.KVCacheSpecKind != nil {
			e.key("kv_cache_spec_kind")
			e.optStr(v.KVCacheSpecKind)
		}
		if v.KVCacheSpecSlidingWindow != nil {
			e.key("kv_cache_spec_sliding_window")
			e.optInt(v.KVCacheSpecSlidingWindow)
		}
		if v.CacheSalt != nil {
			e.key("cache_salt")
			e.optStr(v.CacheSalt)
		}
	case BlockRemoved:
		n := 3
		if v.GroupIdx != nil {
			n++
		}
		_ = m.EncodeMapLen(n)
		e.key("type")
		_ = m.EncodeString(v.Tag())
		e.key("block_hashes")
		e.hashes(v.BlockHashes)
		e.key("medium")
		e.optStr(v.Medium)
		if v.GroupIdx != nil {
			e.key("group_idx")
			e.optInt(v.GroupIdx)
		}
	case AllBlocksCleared:
		_ = m.EncodeMapLen(1)
		e.key("type")
		_ = m.EncodeString(v.Tag())
	default:
		return fmt.Errorf("cannot encode event %T", ev)
	}
	return nil
}

func (e *Encoder) key(k string) { _ = e.enc.EncodeString(k) }

func (e *Encoder) hashes(hs []Hash) {
	_ = e.enc.EncodeArrayLen(len(hs))
	for _, h := range hs {
		e.hash(h)
	}
}

func (e *Encoder) hash(h Hash) {
	switch h.Form {
	case HashUint:
		_ = e.enc.EncodeUint(h.Value)
	case HashInt:
		_ = e.enc.EncodeInt(int64(h.Value))
	case HashBytes:
		_ = e.enc.EncodeBytes(h.Bytes)
	default:
		_ = e.enc.EncodeNil()
	}
}

func (e *Encoder) tokens(ts []uint32, bigrams bool) {
	if bigrams && len(ts) >= 2 {
		_ = e.enc.EncodeArrayLen(len(ts) - 1)
		for i := range len(ts) - 1 {
			_ = e.enc.EncodeArrayLen(2)
			_ = e.enc.EncodeUint(uint64(ts[i]))
			_ = e.enc.EncodeUint(uint64(ts[i+1]))
		}
		return
	}
	_ = e.enc.EncodeArrayLen(len(ts))
	for _, t := range ts {
		_ = e.enc.EncodeUint(uint64(t))
	}
}

func (e *Encoder) optInt(v *int64) {
	if v == nil {
		_ = e.enc.EncodeNil()
		return
	}
	_ = e.enc.EncodeInt(*v)
}

func (e *Encoder) optStr(v *string) {
	if v == nil {
		_ = e.enc.EncodeNil()
		return
	}
	_ = e.enc.EncodeString(*v)
}

func (e *Encoder) extraKeys(keys []ExtraKey) error {
	if keys == nil {
		_ = e.enc.EncodeNil()
		return nil
	}
	_ = e.enc.EncodeArrayLen(len(keys))
	for _, k := range keys {
		if k == nil {
			_ = e.enc.EncodeNil()
			continue
		}
		_ = e.enc.EncodeArrayLen(len(k))
		for _, it := range k {
			if err := e.item(it); err != nil {
				return err
			}
		}
	}
	return nil
}

func (e *Encoder) item(it any) error {
	m := e.enc
	switch v := it.(type) {
	case nil:
		_ = m.EncodeNil()
	case string:
		_ = m.EncodeString(v)
	case []byte:
		_ = m.EncodeBytes(v)
	case bool:
		_ = m.EncodeBool(v)
	case int:
		_ = m.EncodeInt(int64(v))
	case int64:
		_ = m.EncodeInt(v)
	case uint64:
		_ = m.EncodeUint(v)
	case float64:
		_ = m.EncodeFloat64(v)
	case MMItem:
		_ = m.EncodeArrayLen(2)
		_ = m.EncodeString(v.Identifier)
		_ = m.EncodeInt(v.Offset)
	case []any:
		_ = m.EncodeArrayLen(len(v))
		for _, x := range v {
			if err := e.item(x); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("cannot encode extra key item %T", it)
	}
	return nil
}
