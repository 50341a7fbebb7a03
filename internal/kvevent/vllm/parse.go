package vllm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/mpack"
)

// Limits cap what one payload may hold. Counts above them are refused
// before anything is allocated for them.
type Limits struct {
	// MaxEvents is the most events one batch may carry (default 65536);
	// a larger batch is refused whole with ErrTooLarge.
	MaxEvents int
	// MaxBlocks is the most block hashes one event may carry (default
	// 65536, a 1 M-token prompt at block size 16); a larger event is
	// refused with ReasonTooLarge.
	MaxBlocks int
	// MaxTokens is the most token ids one event may carry (default 2^21);
	// a larger event is refused with ReasonTooLarge.
	MaxTokens int
	// MaxString is the longest string kept (tags, medium, LoRA name, cache
	// salt, extra-key items), in bytes (default 4096); a longer one makes
	// its event ReasonTooLarge.
	MaxString int
}

// DefaultLimits returns the documented defaults.
func DefaultLimits() Limits {
	return Limits{MaxEvents: 1 << 16, MaxBlocks: 1 << 16, MaxTokens: 1 << 21, MaxString: 4096}
}

// Validate reports a limit that is not positive.
func (l Limits) Validate() error {
	if l.MaxEvents <= 0 || l.MaxBlocks <= 0 || l.MaxTokens <= 0 || l.MaxString <= 0 {
		return fmt.Errorf("vllm limits must be positive: %+v", l)
	}
	return nil
}

// ParseBatch reads one payload into a RawBatch. A payload that is not a
// batch at all (bad msgpack, truncated, wrong outer shape, too many events)
// is an error wrapping ErrMalformed or ErrTooLarge; an event that cannot be
// read is kept in the batch as a MalformedEvent or UnknownEvent so the rest
// of the batch still counts.
func ParseBatch(payload []byte, lim Limits) (RawBatch, error) {
	p := newParser(lim)
	return p.batch(payload)
}

// parser reads msgpack with vmihailenco/msgpack's low-level decoder over a
// bytes.Reader. The whole payload is first walked by skip, which checks
// every length against the bytes present, so the decoder never sees a
// length it could over-allocate for.
type parser struct {
	buf []byte
	r   bytes.Reader
	d   *msgpack.Decoder
	lim Limits
	// strs and ints intern the optional values that repeat in every event
	// ("GPU", "full_attention", group 0), so decoding does not allocate a
	// pointer for each. Interned pointers are shared: parsed values are
	// read-only.
	strs map[string]*string
	ints [16]*int64
}

func newParser(lim Limits) *parser {
	p := &parser{lim: lim}
	p.d = msgpack.NewDecoder(&p.r)
	return p
}

func (p *parser) off() int { return len(p.buf) - p.r.Len() }

// peek returns the kind, header size and length of the next value.
func (p *parser) peek() (mpack.Kind, int, int) {
	k, hdr, n, err := mpack.Header(p.buf, p.off())
	if err != nil {
		return mpack.Invalid, 0, 0
	}
	return k, hdr, n
}

// seek moves to an absolute offset (always one skip computed).
func (p *parser) seek(off int) { _, _ = p.r.Seek(int64(off), io.SeekStart) }

// skipValue steps over the next value.
func (p *parser) skipValue() error {
	end, err := skip(p.buf, p.off())
	if err != nil {
		return err
	}
	p.seek(end)
	return nil
}

// rawString returns the bytes of the next string without copying, and steps
// over it; ok is false (and nothing consumed) when it is not a string.
func (p *parser) rawString() ([]byte, bool) {
	k, hdr, n := p.peek()
	if k != mpack.Str {
		return nil, false
	}
	start := p.off() + hdr
	p.seek(start + n)
	return p.buf[start : start+n], true
}

func typeErr(what string, k mpack.Kind) error {
	return fmt.Errorf("%w: %s has msgpack kind %d", ErrMalformed, what, k)
}

func (p *parser) batch(payload []byte) (RawBatch, error) {
	p.buf = payload
	p.r.Reset(payload)
	p.d.Reset(&p.r)
	end, err := skip(payload, 0)
	if err != nil {
		return RawBatch{}, err
	}
	if end != len(payload) {
		return RawBatch{}, fmt.Errorf("%w: %d trailing bytes after the batch", ErrMalformed, len(payload)-end)
	}
	var b RawBatch
	switch k, _, _ := p.peek(); k {
	case mpack.Array:
		n, err := p.d.DecodeArrayLen()
		if err != nil {
			return RawBatch{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if n < 2 {
			return RawBatch{}, fmt.Errorf("%w: batch array of %d elements", ErrMalformed, n)
		}
		if b.TS, err = p.float(); err != nil {
			return RawBatch{}, err
		}
		if b.Events, err = p.events(); err != nil {
			return RawBatch{}, err
		}
		if n >= 3 {
			if b.DPRank, err = p.optInt("data_parallel_rank"); err != nil {
				return RawBatch{}, err
			}
		}
	case mpack.Map:
		n, err := p.d.DecodeMapLen()
		if err != nil {
			return RawBatch{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		seen := false
		for range n {
			key, ok := p.rawString()
			if !ok {
				_ = p.skipValue()
				_ = p.skipValue()
				continue
			}
			switch string(key) {
			case "ts":
				b.TS, err = p.float()
			case "events":
				b.Events, err = p.events()
				seen = true
			case "data_parallel_rank":
				b.DPRank, err = p.optInt("data_parallel_rank")
			default:
				err = p.skipValue()
			}
			if err != nil {
				return RawBatch{}, err
			}
		}
		if !seen {
			return RawBatch{}, fmt.Errorf("%w: batch map without events", ErrMalformed)
		}
	default:
		return RawBatch{}, fmt.Errorf("%w: batch is msgpack kind %d, not an array", ErrMalformed, k)
	}
	return b, nil
}

func (p *parser) float() (float64, error) {
	switch k, _, _ := p.peek(); k {
	case mpack.Float:
		v, err := p.d.DecodeFloat64()
		if err != nil {
			return 0, fmt.Errorf("%w: ts: %v", ErrMalformed, err)
		}
		return v, nil
	case mpack.Uint:
		v, err := p.d.DecodeUint64()
		return float64(v), err
	case mpack.Int:
		v, err := p.d.DecodeInt64()
		return float64(v), err
	case mpack.Nil:
		return 0, p.skipValue()
	default:
		return 0, typeErr("ts", k)
	}
}

// arrayLen reads the header of the array field (a type error otherwise);
// more than limit elements is ErrTooLarge, reported as "<n> <noun>".
func (p *parser) arrayLen(field, noun string, limit int) (int, error) {
	if k, _, _ := p.peek(); k != mpack.Array {
		return 0, typeErr(field, k)
	}
	n, err := p.d.DecodeArrayLen()
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if n > limit {
		return 0, fmt.Errorf("%w: %d %s (limit %d)", ErrTooLarge, n, noun, limit)
	}
	return n, nil
}

func (p *parser) events() ([]RawEvent, error) {
	n, err := p.arrayLen("events", "events in one batch", p.lim.MaxEvents)
	if err != nil {
		return nil, err
	}
	evs := make([]RawEvent, 0, n)
	for range n {
		start := p.off()
		ev, err := p.event()
		if err != nil {
			var name string
			if ev != nil {
				name = ev.Tag()
			}
			ev = MalformedEvent{Name: name, Err: err}
			// Step over the whole event from its start (the payload was
			// validated by skip already, so this cannot fail).
			end, serr := skip(p.buf, start)
			if serr != nil {
				return nil, serr
			}
			p.seek(end)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// fields collects an event's fields by name, whichever encoding they came in.
type fields struct {
	tag       string
	stored    BlockStored
	hasHashes bool
	hasTokens bool
	hasSize   bool
}

// Array positions after the tag, in vLLM's declaration order.
var storedOrder = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size",
	"lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
	"kv_cache_spec_sliding_window"}

var removedOrder = []string{"block_hashes", "medium", "group_idx"}

// event reads one tagged event. On error the returned event, when not nil,
// carries the tag read so far.
func (p *parser) event() (RawEvent, error) {
	var f fields
	switch k, _, _ := p.peek(); k {
	case mpack.Array:
		n, err := p.d.DecodeArrayLen()
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%w: empty event array", ErrMalformed)
		}
		tag, ok := p.rawString()
		if !ok {
			return nil, fmt.Errorf("%w: event tag is not a string", ErrMalformed)
		}
		f.tag = tagName(tag)
		var order []string
		switch f.tag {
		case "BlockStored":
			order = storedOrder
		case "BlockRemoved":
			order = removedOrder
		}
		for i := 1; i < n; i++ {
			if i-1 >= len(order) {
				if err := p.skipValue(); err != nil {
					return UnknownEvent{Name: f.tag}, err
				}
				continue
			}
			name := order[i-1]
			if name == "lora_name" {
				// SGLang's BlockStoredWithMetadata puts a metadata map here.
				if k, _, _ := p.peek(); k == mpack.Map {
					name = "metadata"
				}
			}
			if err := p.field(&f, name); err != nil {
				return UnknownEvent{Name: f.tag}, err
			}
		}
	case mpack.Map:
		n, err := p.d.DecodeMapLen()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		for range n {
			key, ok := p.rawString()
			if !ok {
				_ = p.skipValue()
				_ = p.skipValue()
				continue
			}
			if string(key) == "type" {
				tag, ok := p.rawString()
				if !ok {
					return nil, fmt.Errorf("%w: event type is not a string", ErrMalformed)
				}
				f.tag = tagName(tag)
				continue
			}
			if err := p.field(&f, fieldName(key)); err != nil {
				return UnknownEvent{Name: f.tag}, err
			}
		}
	default:
		return nil, typeErr("event", k)
	}
	if len(f.tag) > p.lim.MaxString {
		return nil, fmt.Errorf("%w: event tag of %d bytes", ErrTooLarge, len(f.tag))
	}
	s := f.stored
	switch f.tag {
	case "BlockStored":
		if !f.hasHashes || !f.hasTokens || !f.hasSize {
			return s, fmt.Errorf("%w: BlockStored lacks block_hashes, token_ids or block_size", ErrMalformed)
		}
		return s, nil
	case "BlockRemoved":
		if !f.hasHashes {
			return BlockRemoved{}, fmt.Errorf("%w: BlockRemoved lacks block_hashes", ErrMalformed)
		}
		return BlockRemoved{BlockHashes: s.BlockHashes, Medium: s.Medium, GroupIdx: s.GroupIdx}, nil
	case "AllBlocksCleared":
		return AllBlocksCleared{}, nil
	case "":
		return nil, fmt.Errorf("%w: event without a type", ErrMalformed)
	}
	return UnknownEvent{Name: f.tag}, nil
}

// tagName returns the event tag, without allocating for known ones.
func tagName(b []byte) string {
	switch string(b) {
	case "BlockStored":
		return "BlockStored"
	case "BlockRemoved":
		return "BlockRemoved"
	case "AllBlocksCleared":
		return "AllBlocksCleared"
	}
	return string(b)
}

// fieldName maps a map key to the field name field knows ("" for others),
// without allocating.
func fieldName(b []byte) string {
	for _, n := range storedOrder {
		if string(b) == n {
			return n
		}
	}
	if string(b) == "cache_salt" {
		return "cache_salt"
	}
	return ""
}

// field reads the named field into f; unknown names are skipped.
func (p *parser) field(f *fields, name string) error {
	s := &f.stored
	var err error
	switch name {
	case "block_hashes":
		s.BlockHashes, err = p.hashes()
		f.hasHashes = err == nil
	case "parent_block_hash":
		s.ParentBlockHash, err = p.hash()
	case "token_ids":
		s.TokenIDs, s.Bigrams, err = p.tokens()
		f.hasTokens = err == nil
	case "block_size":
		var v *int64
		v, err = p.optInt(name)
		if err == nil && v != nil {
			s.BlockSize, f.hasSize = *v, true
		}
	case "lora_id":
		s.LoRAID, err = p.optInt(name)
	case "medium":
		s.Medium, err = p.optStr(name)
	case "lora_name":
		s.LoRAName, err = p.optStr(name)
	case "cache_salt":
		s.CacheSalt, err = p.optStr(name)
	case "extra_keys":
		s.ExtraKeys, err = p.extraKeys()
	case "group_idx":
		s.GroupIdx, err = p.optInt(name)
	case "kv_cache_spec_kind":
		s.KVCacheSpecKind, err = p.optStr(name)
	case "kv_cache_spec_sliding_window":
		s.KVCacheSpecSlidingWindow, err = p.optInt(name)
	case "metadata":
		err = p.metadata(s)
	default:
		err = p.skipValue()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// metadata reads SGLang's trailing {"cache_salt": ...} map.
func (p *parser) metadata(s *BlockStored) error {
	n, err := p.d.DecodeMapLen()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	for range n {
		key, ok := p.rawString()
		if ok && string(key) == "cache_salt" {
			if s.CacheSalt, err = p.optStr("cache_salt"); err != nil {
				return err
			}
			continue
		}
		if !ok {
			if err := p.skipValue(); err != nil {
				return err
			}
		}
		if err := p.skipValue(); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) hashes() ([]Hash, error) {
	n, err := p.arrayLen("block_hashes", "block hashes", p.lim.MaxBlocks)
	if err != nil {
		return nil, err
	}
	hs := make([]Hash, n)
	for i := range hs {
		if hs[i], err = p.hash(); err != nil {
			return nil, err
		}
		if hs[i].IsNil() {
			return nil, fmt.Errorf("%w: nil block hash", ErrMalformed)
		}
	}
	return hs, nil
}

func (p *parser) hash() (Hash, error) {
	switch k, _, n := p.peek(); k {
	case mpack.Nil:
		return Hash{}, p.skipValue()
	case mpack.Uint:
		v, err := p.d.DecodeUint64()
		return UintHash(v), err
	case mpack.Int:
		v, err := p.d.DecodeInt64()
		if v >= 0 {
			return UintHash(uint64(v)), err
		}
		return IntHash(v), err
	case mpack.Bin:
		if n > p.lim.MaxString {
			return Hash{}, fmt.Errorf("%w: %d-byte hash", ErrTooLarge, n)
		}
		b, err := p.d.DecodeBytes()
		if err != nil {
			return Hash{}, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		return BytesHash(b), nil
	default:
		return Hash{}, typeErr("block hash", k)
	}
}

// tokens reads token_ids, flat or as EAGLE bigram pairs.
func (p *parser) tokens() ([]uint32, bool, error) {
	// One id less than the limit: EAGLE pairs flatten to n+1 ids.
	n, err := p.arrayLen("token_ids", "token ids", p.lim.MaxTokens-1)
	if err != nil {
		return nil, false, err
	}
	if n == 0 {
		return []uint32{}, false, nil
	}
	if k, _, _ := p.peek(); k == mpack.Array {
		// EAGLE: [[a,b],[b,c],...] flattens to [a,b,c,...].
		toks := make([]uint32, 0, n+1)
		var last uint32
		for range n {
			m, err := p.d.DecodeArrayLen()
			if err != nil || m < 2 {
				return nil, false, fmt.Errorf("%w: EAGLE token pair of %d ids", ErrMalformed, m)
			}
			first, err := p.token()
			if err != nil {
				return nil, false, err
			}
			if last, err = p.token(); err != nil {
				return nil, false, err
			}
			for j := 2; j < m; j++ {
				if err := p.skipValue(); err != nil {
					return nil, false, err
				}
			}
			toks = append(toks, first)
		}
		return append(toks, last), true, nil
	}
	toks := make([]uint32, n)
	for i := range toks {
		if toks[i], err = p.token(); err != nil {
			return nil, false, err
		}
	}
	return toks, false, nil
}

// token reads one token id. It is the hot loop of the decoder, so it
// reads the (already bounds-checked) integer in place instead of through
// the msgpack decoder.
func (p *parser) token() (uint32, error) {
	off := p.off()
	k, hdr, n, err := mpack.Header(p.buf, off)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if k != mpack.Uint {
		return 0, typeErr("token id", k)
	}
	if off+hdr+n > len(p.buf) {
		return 0, fmt.Errorf("%w: truncated token id", ErrMalformed)
	}
	var v uint64
	switch n {
	case 0:
		v = uint64(p.buf[off])
	case 1:
		v = uint64(p.buf[off+1])
	case 2:
		v = uint64(binary.BigEndian.Uint16(p.buf[off+1:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(p.buf[off+1:]))
	default:
		v = binary.BigEndian.Uint64(p.buf[off+1:])
	}
	if v > math.MaxUint32 {
		return 0, fmt.Errorf("%w: token id %d over 32 bits", ErrMalformed, v)
	}
	p.seek(off + hdr + n)
	return uint32(v), nil
}

func (p *parser) optInt(name string) (*int64, error) {
	switch k, _, _ := p.peek(); k {
	case mpack.Nil:
		return nil, p.skipValue()
	case mpack.Uint:
		v, err := p.d.DecodeUint64()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("%w: %s %d out of range", ErrMalformed, name, v)
		}
		return p.intern(int64(v)), nil
	case mpack.Int:
		v, err := p.d.DecodeInt64()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		return Int(v), nil
	default:
		return nil, typeErr(name, k)
	}
}

func (p *parser) optStr(name string) (*string, error) {
	switch k, _, n := p.peek(); k {
	case mpack.Nil:
		return nil, p.skipValue()
	case mpack.Str:
		if n > p.lim.MaxString {
			return nil, fmt.Errorf("%w: %s of %d bytes", ErrTooLarge, name, n)
		}
		b, _ := p.rawString()
		if v, ok := p.strs[string(b)]; ok {
			return v, nil
		}
		v := Str(string(b))
		if len(b) <= 64 && len(p.strs) < 64 {
			if p.strs == nil {
				p.strs = map[string]*string{}
			}
			p.strs[*v] = v
		}
		return v, nil
	default:
		return nil, typeErr(name, k)
	}
}

// intern returns a shared pointer for small values.
func (p *parser) intern(v int64) *int64 {
	if v < 0 || v >= int64(len(p.ints)) {
		return Int(v)
	}
	if p.ints[v] == nil {
		p.ints[v] = Int(v)
	}
	return p.ints[v]
}

func (p *parser) extraKeys() ([]ExtraKey, error) {
	if k, _, _ := p.peek(); k == mpack.Nil {
		return nil, p.skipValue()
	}
	n, err := p.arrayLen("extra_keys", "extra keys", p.lim.MaxBlocks)
	if err != nil {
		return nil, err
	}
	keys := make([]ExtraKey, n)
	for i := range keys {
		switch k, _, _ := p.peek(); k {
		case mpack.Nil:
			if err := p.skipValue(); err != nil {
				return nil, err
			}
		case mpack.Array:
			m, err := p.d.DecodeArrayLen()
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			key := make(ExtraKey, 0, m)
			for range m {
				it, err := p.item(0)
				if err != nil {
					return nil, err
				}
				key = append(key, it)
			}
			keys[i] = key
		default:
			return nil, typeErr("extra key", k)
		}
	}
	return keys, nil
}

// item reads one extra-key item: scalars as Go values, [str, int] pairs as
// MMItem, other arrays as []any (a few levels deep), maps skipped to nil.
func (p *parser) item(depth int) (any, error) {
	switch k, _, n := p.peek(); k {
	case mpack.Nil:
		return nil, p.skipValue()
	case mpack.Bool:
		return p.d.DecodeBool()
	case mpack.Uint:
		return p.d.DecodeUint64()
	case mpack.Int:
		return p.d.DecodeInt64()
	case mpack.Float:
		return p.d.DecodeFloat64()
	case mpack.Str:
		if n > p.lim.MaxString {
			return nil, fmt.Errorf("%w: extra key item of %d bytes", ErrTooLarge, n)
		}
		b, _ := p.rawString()
		return string(b), nil
	case mpack.Bin:
		if n > p.lim.MaxString {
			return nil, fmt.Errorf("%w: extra key item of %d bytes", ErrTooLarge, n)
		}
		return p.d.DecodeBytes()
	case mpack.Array:
		if depth >= 3 {
			return nil, p.skipValue()
		}
		m, err := p.d.DecodeArrayLen()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		out := make([]any, 0, m)
		for range m {
			it, err := p.item(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, it)
		}
		if len(out) == 2 {
			id, ok1 := out[0].(string)
			switch off := out[1].(type) {
			case int64:
				if ok1 {
					return MMItem{Identifier: id, Offset: off}, nil
				}
			case uint64:
				if ok1 && off <= math.MaxInt64 {
					return MMItem{Identifier: id, Offset: int64(off)}, nil
				}
			}
		}
		return out, nil
	default:
		return nil, p.skipValue()
	}
}
