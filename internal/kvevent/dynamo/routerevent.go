package dynamo

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mpack"
)

// MaxBlocksPerEvent caps the stored blocks (or removed hashes) one event may
// carry; a larger event is refused with ErrTooManyBlocks. 131072 blocks is a
// 128 k-token prompt at page size 1, far above what any publisher batches.
const MaxBlocksPerEvent = 1 << 17

// ErrMalformed is wrapped by every decoding error caused by the input.
var ErrMalformed = errors.New("malformed dynamo event")

// ErrTooManyBlocks is wrapped when an event carries more than
// MaxBlocksPerEvent blocks or hashes.
var ErrTooManyBlocks = errors.New("too many blocks in one event")

// Field and variant names as Dynamo's serde writes them.
const (
	keyWorkerID      = "worker_id"
	keyStorageTier   = "storage_tier"
	keyEvent         = "event"
	keyEventID       = "event_id"
	keyData          = "data"
	keyDPRank        = "dp_rank"
	keyParentHash    = "parent_hash"
	keyStartPosition = "start_position"
	keyBlocks        = "blocks"
	keyBlockHash     = "block_hash"
	keyTokensHash    = "tokens_hash"
	keyMMExtraInfo   = "mm_extra_info"
	keyBlockHashes   = "block_hashes"
)

// AppendEvent appends ev as a msgpack RouterEvent with named fields, byte
// for byte what rmp_serde::to_vec_named writes for the same Dynamo value:
//
//	{worker_id, storage_tier, event: {event_id, data, dp_rank}}
//
// with data {"stored": {parent_hash, start_position: nil, blocks: [{block_hash,
// tokens_hash, mm_extra_info: nil}]}}, {"removed": {block_hashes}} or the bare
// string "cleared". It fails only on an event kind or tier it does not know.
func AppendEvent(dst []byte, ev kvevent.Event) ([]byte, error) {
	if ev.Tier >= kvevent.NumTiers {
		return dst, fmt.Errorf("encoding dynamo event: unknown tier %v", ev.Tier)
	}
	if ev.Kind < kvevent.Stored || ev.Kind > kvevent.Cleared {
		return dst, fmt.Errorf("encoding dynamo event: unknown kind %v", ev.Kind)
	}
	b := appendMapLen(dst, 3)
	b = appendStr(b, keyWorkerID)
	b = appendUint(b, uint64(ev.Worker.ID))
	b = appendStr(b, keyStorageTier)
	b = appendStr(b, ev.Tier.String())
	b = appendStr(b, keyEvent)
	b = appendMapLen(b, 3)
	b = appendStr(b, keyEventID)
	b = appendUint(b, ev.ID)
	b = appendStr(b, keyData)
	switch ev.Kind {
	case kvevent.Stored:
		b = appendMapLen(b, 1)
		b = appendStr(b, "stored")
		b = appendMapLen(b, 3)
		b = appendStr(b, keyParentHash)
		if ev.HasParent {
			b = appendUint(b, ev.Parent)
		} else {
			b = appendNil(b)
		}
		b = appendStr(b, keyStartPosition)
		b = appendNil(b)
		b = appendStr(b, keyBlocks)
		b = appendArrayLen(b, len(ev.Blocks))
		for _, bl := range ev.Blocks {
			b = appendMapLen(b, 3)
			b = appendStr(b, keyBlockHash)
			b = appendUint(b, bl.EngineHash)
			b = appendStr(b, keyTokensHash)
			b = appendUint(b, bl.LocalHash)
			b = appendStr(b, keyMMExtraInfo)
			b = appendNil(b)
		}
	case kvevent.Removed:
		b = appendMapLen(b, 1)
		b = appendStr(b, "removed")
		b = appendMapLen(b, 1)
		b = appendStr(b, keyBlockHashes)
		b = appendArrayLen(b, len(ev.Removed))
		for _, h := range ev.Removed {
			b = appendUint(b, h)
		}
	case kvevent.Cleared:
		b = appendStr(b, "cleared")
	}
	b = appendStr(b, keyDPRank)
	b = appendUint(b, uint64(ev.Worker.Rank))
	return b, nil
}

// EncodeEvent returns ev as a msgpack RouterEvent (see AppendEvent).
func EncodeEvent(ev kvevent.Event) ([]byte, error) {
	return AppendEvent(make([]byte, 0, 64+len(ev.Blocks)*48+len(ev.Removed)*9), ev)
}

// DecodeEvent decodes a msgpack RouterEvent. Fields may come in any order,
// unknown fields are skipped, storage_tier and dp_rank default to device and
// 0, and data may be the bare string "cleared" or a one-entry map of any
// variant. Trailing bytes after the RouterEvent are an error.
func DecodeEvent(b []byte) (kvevent.Event, error) {
	r := mpack.NewReader(b)
	ev, err := decodeRouterEvent(r)
	if err == nil && r.Remaining() != 0 {
		err = fmt.Errorf("%d trailing bytes", r.Remaining())
	}
	if err != nil {
		return kvevent.Event{}, wrapMalformed("decoding dynamo router event", err)
	}
	return ev, nil
}

func wrapMalformed(ctx string, err error) error {
	if errors.Is(err, ErrTooManyBlocks) {
		return fmt.Errorf("%s: %w", ctx, err)
	}
	return fmt.Errorf("%s: %w: %w", ctx, ErrMalformed, err)
}

func decodeRouterEvent(r *mpack.Reader) (kvevent.Event, error) {
	var ev kvevent.Event
	n, err := r.MapLen()
	if err != nil {
		return ev, err
	}
	var haveWorker, haveEvent bool
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return ev, fmt.Errorf("field name: %w", err)
		}
		switch string(k) {
		case keyWorkerID:
			v, err := r.Uint(math.MaxUint64)
			if err != nil {
				return ev, fmt.Errorf("worker_id: %w", err)
			}
			ev.Worker.ID = kvevent.WorkerID(v)
			haveWorker = true
		case keyStorageTier:
			if isNil, err := r.IsNil(); err != nil || isNil {
				if err != nil {
					return ev, err
				}
				continue
			}
			s, err := r.StrBytes()
			if err != nil {
				return ev, fmt.Errorf("storage_tier: %w", err)
			}
			t, err := kvevent.ParseTier(string(s))
			if err != nil {
				return ev, err
			}
			ev.Tier = t
		case keyEvent:
			if err := decodeCacheEvent(r, &ev); err != nil {
				return ev, fmt.Errorf("event: %w", err)
			}
			haveEvent = true
		default:
			if err := r.Skip(); err != nil {
				return ev, fmt.Errorf("field %q: %w", k, err)
			}
		}
	}
	if !haveWorker {
		return ev, errors.New("missing worker_id")
	}
	if !haveEvent {
		return ev, errors.New("missing event")
	}
	return ev, nil
}

func decodeCacheEvent(r *mpack.Reader, ev *kvevent.Event) error {
	n, err := r.MapLen()
	if err != nil {
		return err
	}
	var haveID, haveData bool
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		switch string(k) {
		case keyEventID:
			if ev.ID, err = r.Uint(math.MaxUint64); err != nil {
				return fmt.Errorf("event_id: %w", err)
			}
			haveID = true
		case keyDPRank:
			if isNil, err := r.IsNil(); err != nil || isNil {
				if err != nil {
					return err
				}
				continue
			}
			v, err := r.Uint(math.MaxUint32)
			if err != nil {
				return fmt.Errorf("dp_rank: %w", err)
			}
			ev.Worker.Rank = kvevent.DPRank(v)
		case keyData:
			if err := decodeData(r, ev); err != nil {
				return fmt.Errorf("data: %w", err)
			}
			haveData = true
		default:
			if err := r.Skip(); err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
		}
	}
	if !haveID {
		return errors.New("missing event_id")
	}
	if !haveData {
		return errors.New("missing data")
	}
	return nil
}

// decodeData reads the externally tagged KvCacheEventData enum.
func decodeData(r *mpack.Reader, ev *kvevent.Event) error {
	c, err := r.Peek()
	if err != nil {
		return err
	}
	if (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb {
		s, err := r.StrBytes()
		if err != nil {
			return err
		}
		if string(s) != "cleared" {
			return fmt.Errorf("unknown or incomplete variant %q", s)
		}
		ev.Kind = kvevent.Cleared
		return nil
	}
	n, err := r.MapLen()
	if err != nil {
		return err
	}
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return fmt.Errorf("variant name: %w", err)
		}
		if ev.Kind != 0 {
			// A second variant in one enum value: serde would refuse it.
			return fmt.Errorf("more than one variant (%q after %v)", k, ev.Kind)
		}
		switch string(k) {
		case "stored":
			ev.Kind = kvevent.Stored
			err = decodeStored(r, ev)
		case "removed":
			ev.Kind = kvevent.Removed
			err = decodeRemoved(r, ev)
		case "cleared":
			ev.Kind = kvevent.Cleared
			err = r.Skip() // {"cleared": nil} or {"cleared": []}
		default:
			return fmt.Errorf("unknown variant %q", k)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	if ev.Kind == 0 {
		return errors.New("empty variant map")
	}
	return nil
}

func decodeStored(r *mpack.Reader, ev *kvevent.Event) error {
	n, err := r.MapLen()
	if err != nil {
		return err
	}
	haveBlocks := false
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		switch string(k) {
		case keyParentHash:
			isNil, err := r.IsNil()
			if err != nil {
				return err
			}
			if !isNil {
				if ev.Parent, err = r.Hash(); err != nil {
					return fmt.Errorf("parent_hash: %w", err)
				}
				ev.HasParent = true
			}
		case keyBlocks:
			if err := decodeBlocks(r, ev); err != nil {
				return fmt.Errorf("blocks: %w", err)
			}
			haveBlocks = true
		default: // start_position and anything newer
			if err := r.Skip(); err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
		}
	}
	if !haveBlocks {
		return errors.New("missing blocks")
	}
	return nil
}

func decodeBlocks(r *mpack.Reader, ev *kvevent.Event) error {
	n, err := r.ArrayLen()
	if err != nil {
		return err
	}
	if n > MaxBlocksPerEvent {
		return fmt.Errorf("%w: %d > %d", ErrTooManyBlocks, n, MaxBlocksPerEvent)
	}
	ev.Blocks = make([]kvevent.Block, 0, n) // n is bounded by the input size
	for i := range n {
		bl, err := decodeBlock(r)
		if err != nil {
			return fmt.Errorf("block %d: %w", i, err)
		}
		ev.Blocks = append(ev.Blocks, bl)
	}
	return nil
}

func decodeBlock(r *mpack.Reader) (kvevent.Block, error) {
	var bl kvevent.Block
	c, err := r.Peek()
	if err != nil {
		return bl, err
	}
	if (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd {
		// Positional form [block_hash, tokens_hash, ...]: not what
		// to_vec_named writes, accepted anyway.
		n, err := r.ArrayLen()
		if err != nil {
			return bl, err
		}
		if n < 2 {
			return bl, fmt.Errorf("positional block with %d fields", n)
		}
		if bl.EngineHash, err = r.Hash(); err != nil {
			return bl, err
		}
		if bl.LocalHash, err = r.Hash(); err != nil {
			return bl, err
		}
		for range n - 2 {
			if err := r.Skip(); err != nil {
				return bl, err
			}
		}
		return bl, nil
	}
	n, err := r.MapLen()
	if err != nil {
		return bl, err
	}
	var haveEngine, haveLocal bool
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return bl, fmt.Errorf("field name: %w", err)
		}
		switch string(k) {
		case keyBlockHash:
			bl.EngineHash, err = r.Hash()
			haveEngine = true
		case keyTokensHash:
			bl.LocalHash, err = r.Hash()
			haveLocal = true
		default: // mm_extra_info and anything newer
			err = r.Skip()
		}
		if err != nil {
			return bl, fmt.Errorf("field %q: %w", k, err)
		}
	}
	if !haveEngine || !haveLocal {
		return bl, errors.New("block needs block_hash and tokens_hash")
	}
	return bl, nil
}

func decodeRemoved(r *mpack.Reader, ev *kvevent.Event) error {
	n, err := r.MapLen()
	if err != nil {
		return err
	}
	have := false
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return fmt.Errorf("field name: %w", err)
		}
		if string(k) != keyBlockHashes {
			if err := r.Skip(); err != nil {
				return fmt.Errorf("field %q: %w", k, err)
			}
			continue
		}
		m, err := r.ArrayLen()
		if err != nil {
			return fmt.Errorf("block_hashes: %w", err)
		}
		if m > MaxBlocksPerEvent {
			return fmt.Errorf("%w: %d > %d", ErrTooManyBlocks, m, MaxBlocksPerEvent)
		}
		ev.Removed = make([]uint64, 0, m)
		for i := range m {
			h, err := r.Hash()
			if err != nil {
				return fmt.Errorf("block_hashes[%d]: %w", i, err)
			}
			ev.Removed = append(ev.Removed, h)
		}
		have = true
	}
	if !have {
		return errors.New("missing block_hashes")
	}
	return nil
}

// DecodeEventArray reads a msgpack array of bin values, each one
// RouterEvent in Dynamo's encoding (how recovery replies and index
// snapshots carry events); nil reads as no events. Every event must decode.
func DecodeEventArray(d *mpack.Decoder) ([]kvevent.Event, error) {
	n, err := d.ArrayLen(math.MaxInt)
	if err != nil {
		return nil, err
	}
	var out []kvevent.Event
	for i := range n {
		raw, err := d.DecodeBytes()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		ev, err := DecodeEvent(raw)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		out = append(out, ev)
	}
	return out, nil
}
