package dynamo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// The JSON form of RouterEvent is what serde_json writes for the same value
// (Dynamo's JetStream durable mode stores events this way): the same field
// names, None as null, the unit variant "cleared" as a bare string, and u64
// values as plain JSON integers at full precision.

type jsonRouterEvent struct {
	WorkerID    *json.Number     `json:"worker_id"`
	StorageTier *string          `json:"storage_tier"`
	Event       *json.RawMessage `json:"event"`
}

type jsonCacheEvent struct {
	EventID *json.Number     `json:"event_id"`
	Data    *json.RawMessage `json:"data"`
	DPRank  *json.Number     `json:"dp_rank"`
}

type jsonStored struct {
	ParentHash *json.Number `json:"parent_hash"`
	Blocks     *[]jsonBlock `json:"blocks"`
}

type jsonBlock struct {
	BlockHash  *json.Number `json:"block_hash"`
	TokensHash *json.Number `json:"tokens_hash"`
}

type jsonRemoved struct {
	BlockHashes *[]json.Number `json:"block_hashes"`
}

// EncodeEventJSON returns ev as serde_json would write the RouterEvent.
func EncodeEventJSON(ev kvevent.Event) ([]byte, error) {
	if ev.Tier >= kvevent.NumTiers {
		return nil, fmt.Errorf("encoding dynamo event: unknown tier %v", ev.Tier)
	}
	var b bytes.Buffer
	b.Grow(128 + 64*len(ev.Blocks) + 21*len(ev.Removed))
	b.WriteString(`{"worker_id":`)
	b.WriteString(strconv.FormatUint(uint64(ev.Worker.ID), 10))
	b.WriteString(`,"storage_tier":"`)
	b.WriteString(ev.Tier.String())
	b.WriteString(`","event":{"event_id":`)
	b.WriteString(strconv.FormatUint(ev.ID, 10))
	b.WriteString(`,"data":`)
	switch ev.Kind {
	case kvevent.Stored:
		b.WriteString(`{"stored":{"parent_hash":`)
		if ev.HasParent {
			b.WriteString(strconv.FormatUint(ev.Parent, 10))
		} else {
			b.WriteString("null")
		}
		b.WriteString(`,"start_position":null,"blocks":[`)
		for i, bl := range ev.Blocks {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"block_hash":`)
			b.WriteString(strconv.FormatUint(bl.EngineHash, 10))
			b.WriteString(`,"tokens_hash":`)
			b.WriteString(strconv.FormatUint(bl.LocalHash, 10))
			b.WriteString(`,"mm_extra_info":null}`)
		}
		b.WriteString(`]}}`)
	case kvevent.Removed:
		b.WriteString(`{"removed":{"block_hashes":[`)
		for i, h := range ev.Removed {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(h, 10))
		}
		b.WriteString(`]}}`)
	case kvevent.Cleared:
		b.WriteString(`"cleared"`)
	default:
		return nil, fmt.Errorf("encoding dynamo event: unknown kind %v", ev.Kind)
	}
	b.WriteString(`,"dp_rank":`)
	b.WriteString(strconv.FormatUint(uint64(ev.Worker.Rank), 10))
	b.WriteString(`}}`)
	return b.Bytes(), nil
}

// DecodeEventJSON decodes the JSON form of a RouterEvent, with the same
// leniency as DecodeEvent (unknown fields ignored, defaults for optional
// fields, negative hashes reinterpreted as unsigned, "cleared" as a string or
// a one-entry object).
func DecodeEventJSON(b []byte) (kvevent.Event, error) {
	ev, err := decodeEventJSON(b)
	if err != nil {
		return kvevent.Event{}, wrapMalformed("decoding dynamo router event json", err)
	}
	return ev, nil
}

func decodeEventJSON(b []byte) (kvevent.Event, error) {
	var ev kvevent.Event
	var re jsonRouterEvent
	if err := unmarshalNumbers(b, &re); err != nil {
		return ev, err
	}
	if re.WorkerID == nil {
		return ev, errors.New("missing worker_id")
	}
	id, err := jsonUint(*re.WorkerID, math.MaxUint64)
	if err != nil {
		return ev, fmt.Errorf("worker_id: %w", err)
	}
	ev.Worker.ID = kvevent.WorkerID(id)
	if re.StorageTier != nil {
		if ev.Tier, err = kvevent.ParseTier(*re.StorageTier); err != nil {
			return ev, err
		}
	}
	if re.Event == nil {
		return ev, errors.New("missing event")
	}
	var ce jsonCacheEvent
	if err := unmarshalNumbers(*re.Event, &ce); err != nil {
		return ev, fmt.Errorf("event: %w", err)
	}
	if ce.EventID == nil {
		return ev, errors.New("missing event_id")
	}
	if ev.ID, err = jsonUint(*ce.EventID, math.MaxUint64); err != nil {
		return ev, fmt.Errorf("event_id: %w", err)
	}
	if ce.DPRank != nil {
		r, err := jsonUint(*ce.DPRank, math.MaxUint32)
		if err != nil {
			return ev, fmt.Errorf("dp_rank: %w", err)
		}
		ev.Worker.Rank = kvevent.DPRank(r)
	}
	if ce.Data == nil {
		return ev, errors.New("missing data")
	}
	if err := decodeDataJSON(*ce.Data, &ev); err != nil {
		return ev, fmt.Errorf("data: %w", err)
	}
	return ev, nil
}

func decodeDataJSON(raw json.RawMessage, ev *kvevent.Event) error {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s != "cleared" {
			return fmt.Errorf("unknown or incomplete variant %q", s)
		}
		ev.Kind = kvevent.Cleared
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	if len(m) != 1 {
		return fmt.Errorf("variant object with %d entries, want 1", len(m))
	}
	for k, v := range m {
		switch k {
		case "stored":
			ev.Kind = kvevent.Stored
			var st jsonStored
			if err := unmarshalNumbers(v, &st); err != nil {
				return fmt.Errorf("stored: %w", err)
			}
			if st.ParentHash != nil {
				h, err := jsonHash(*st.ParentHash)
				if err != nil {
					return fmt.Errorf("parent_hash: %w", err)
				}
				ev.HasParent, ev.Parent = true, h
			}
			if st.Blocks == nil {
				return errors.New("stored: missing blocks")
			}
			if len(*st.Blocks) > MaxBlocksPerEvent {
				return fmt.Errorf("%w: %d > %d", ErrTooManyBlocks, len(*st.Blocks), MaxBlocksPerEvent)
			}
			ev.Blocks = make([]kvevent.Block, 0, len(*st.Blocks))
			for i, jb := range *st.Blocks {
				if jb.BlockHash == nil || jb.TokensHash == nil {
					return fmt.Errorf("block %d needs block_hash and tokens_hash", i)
				}
				eh, err := jsonHash(*jb.BlockHash)
				if err != nil {
					return fmt.Errorf("block %d block_hash: %w", i, err)
				}
				lh, err := jsonHash(*jb.TokensHash)
				if err != nil {
					return fmt.Errorf("block %d tokens_hash: %w", i, err)
				}
				ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: eh, LocalHash: lh})
			}
		case "removed":
			ev.Kind = kvevent.Removed
			var rm jsonRemoved
			if err := unmarshalNumbers(v, &rm); err != nil {
				return fmt.Errorf("removed: %w", err)
			}
			if rm.BlockHashes == nil {
				return errors.New("removed: missing block_hashes")
			}
			if len(*rm.BlockHashes) > MaxBlocksPerEvent {
				return fmt.Errorf("%w: %d > %d", ErrTooManyBlocks, len(*rm.BlockHashes), MaxBlocksPerEvent)
			}
			ev.Removed = make([]uint64, 0, len(*rm.BlockHashes))
			for i, n := range *rm.BlockHashes {
				h, err := jsonHash(n)
				if err != nil {
					return fmt.Errorf("block_hashes[%d]: %w", i, err)
				}
				ev.Removed = append(ev.Removed, h)
			}
		case "cleared":
			ev.Kind = kvevent.Cleared
		default:
			return fmt.Errorf("unknown variant %q", k)
		}
	}
	return nil
}

func unmarshalNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// jsonUint parses a non-negative integer no larger than max.
func jsonUint(n json.Number, max uint64) (uint64, error) {
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not an unsigned integer: %q", n)
	}
	if v > max {
		return 0, fmt.Errorf("value %d out of range (max %d)", v, max)
	}
	return v, nil
}

// jsonHash parses a u64 hash, or an i64 reinterpreted as u64.
func jsonHash(n json.Number) (uint64, error) {
	if v, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return v, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("not a 64-bit integer: %q", n)
	}
	return uint64(v), nil
}
