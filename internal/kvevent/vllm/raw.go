package vllm

// RawBatch is one msgpack payload as the engine wrote it (vLLM's
// KVEventBatch): a timestamp, the events of one scheduler step, and the
// data-parallel rank of the publisher.
type RawBatch struct {
	// TS is the publisher's wall clock in seconds since the Unix epoch.
	TS float64
	// Events are the step's events in order.
	Events []RawEvent
	// DPRank is the publisher's data-parallel rank; nil when the batch
	// carries none (vLLM v0.9's two-element batch, or an explicit nil).
	DPRank *int64
}

// RawEvent is one event of a RawBatch: BlockStored, BlockRemoved,
// AllBlocksCleared, or, when parsing, UnknownEvent or MalformedEvent.
type RawEvent interface {
	// Tag is the event's class name, the msgspec tag ("BlockStored", ...).
	Tag() string
}

var (
	_ RawEvent = BlockStored{}
	_ RawEvent = BlockRemoved{}
	_ RawEvent = AllBlocksCleared{}
	_ RawEvent = UnknownEvent{}
	_ RawEvent = MalformedEvent{}
)

// BlockStored announces blocks newly filled and cached by the engine, in
// chain order. Optional fields are pointers or nil slices; nil means the
// engine wrote nil or left the field out. The parser shares the pointers of
// repeated values between events, so treat parsed values as read-only.
type BlockStored struct {
	// BlockHashes are the engine's ids of the stored blocks.
	BlockHashes []Hash
	// ParentBlockHash is the id of the first block's parent; nil for the
	// first block of a sequence.
	ParentBlockHash Hash
	// TokenIDs are the token ids of all stored blocks, concatenated.
	TokenIDs []uint32
	// Bigrams is set by the parser when token_ids came as EAGLE bigram
	// pairs [[a,b],[b,c],...]; TokenIDs then holds the flattened form (the
	// first element of every pair, then the last pair's second element).
	// The encoder writes pairs when it is set and there are at least two
	// ids.
	Bigrams bool
	// BlockSize is the number of tokens per block.
	BlockSize int64
	// LoRAID is the deprecated integer adapter id.
	LoRAID *int64
	// Medium is the storage medium ("GPU", "CPU", ...); nil means GPU.
	Medium *string
	// LoRAName is the LoRA adapter name, which enters vLLM's hash.
	LoRAName *string
	// ExtraKeys holds one entry per block: nil for None, otherwise the
	// tuple of extra hash inputs (LoRA name, MMItem values, cache salt,
	// prompt-embeds digest). The whole field is nil when absent.
	ExtraKeys []ExtraKey
	// GroupIdx is the KV cache group the blocks belong to.
	GroupIdx *int64
	// KVCacheSpecKind is the group's attention kind ("full_attention", ...).
	KVCacheSpecKind *string
	// KVCacheSpecSlidingWindow is the group's sliding window in tokens.
	KVCacheSpecSlidingWindow *int64
	// CacheSalt is SGLang's event-level cache salt (its metadata map, or
	// the cache_salt key of its tagged-map form). vLLM puts the salt in
	// ExtraKeys instead. Encoded only in the map form, and only when set.
	CacheSalt *string
}

// Tag returns "BlockStored".
func (BlockStored) Tag() string { return "BlockStored" }

// BlockRemoved announces blocks evicted from the engine's cache.
type BlockRemoved struct {
	// BlockHashes are the engine's ids of the removed blocks.
	BlockHashes []Hash
	// Medium is the storage medium; nil means GPU.
	Medium *string
	// GroupIdx is the KV cache group of the blocks.
	GroupIdx *int64
}

// Tag returns "BlockRemoved".
func (BlockRemoved) Tag() string { return "BlockRemoved" }

// AllBlocksCleared announces that the engine dropped its whole prefix cache.
type AllBlocksCleared struct{}

// Tag returns "AllBlocksCleared".
func (AllBlocksCleared) Tag() string { return "AllBlocksCleared" }

// UnknownEvent is an event whose tag the parser does not know; it is
// skipped whole.
type UnknownEvent struct {
	// Name is the tag as sent.
	Name string
}

// Tag returns the unknown tag.
func (e UnknownEvent) Tag() string { return e.Name }

// MalformedEvent is an event the parser could step over but not read: a
// field of the wrong type, a value out of range, or a size over the limits.
type MalformedEvent struct {
	// Name is the event's tag, when it could be read.
	Name string
	// Err says what was wrong; it wraps ErrMalformed or ErrTooLarge.
	Err error
}

// Tag returns the event's tag.
func (e MalformedEvent) Tag() string { return e.Name }

// ExtraKey is the tuple of extra hash inputs of one block; nil is None.
// Items are string, []byte, MMItem, int64, uint64, float64, bool, nil or
// []any (anything else msgspec could write).
type ExtraKey []any

// MMItem is a multimodal entry of an extra key: the item's identifier (a
// content digest, usually 64 hex characters) and its token offset.
type MMItem struct {
	// Identifier is the multimodal item's id.
	Identifier string
	// Offset is the item's offset (in tokens) relative to the block.
	Offset int64
}

// Str returns a pointer to s, for the optional string fields.
func Str(s string) *string { return &s }

// Int returns a pointer to v, for the optional integer fields.
func Int(v int64) *int64 { return &v }
