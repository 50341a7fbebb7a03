package vllm

import (
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// Config configures a Decoder for one worker rank.
type Config struct {
	// Worker is the worker rank the decoded events are attributed to.
	Worker kvevent.WorkerRank
	// BlockSize is the worker's configured KV block size in tokens; stored
	// events with any other block_size are refused (ReasonBlockSize).
	// Required; DefaultConfig uses vLLM's default, 16.
	BlockSize int
	// Limits caps payload sizes (DefaultLimits).
	Limits Limits
	// MaxSaltedBlocks caps how many salted blocks the decoder remembers to
	// pass a cache salt on to their children (default 131072, about an
	// engine rank's whole GPU cache; ~50 bytes each). Past it, new
	// salted blocks are not remembered: their children hash unsalted and
	// simply never match (a miss, never a false hit).
	MaxSaltedBlocks int
}

// DefaultConfig returns a configuration with vLLM's default block size.
func DefaultConfig() Config {
	return Config{BlockSize: 16, Limits: DefaultLimits(), MaxSaltedBlocks: 1 << 17}
}

// Validate checks the configuration once, before use.
func (c Config) Validate() error {
	if c.BlockSize <= 0 {
		return fmt.Errorf("vllm decoder: block size %d must be positive", c.BlockSize)
	}
	if c.MaxSaltedBlocks < 0 {
		return fmt.Errorf("vllm decoder: max salted blocks %d is negative", c.MaxSaltedBlocks)
	}
	return c.Limits.Validate()
}

// Result is one decoded batch.
type Result struct {
	// TS is the publisher's timestamp in seconds since the Unix epoch.
	TS float64
	// DPRank is the batch's data-parallel rank, nil when it carries none.
	DPRank *int64
	// Events are the accepted events, in batch order.
	Events []kvevent.Event
	// Refused are the events dropped, each with its reason.
	Refused []Refusal
}

// Decoder turns vLLM payloads of one worker rank into kvevent.Event values.
//
// It keeps a little state per stream: which KV cache group is the main
// attention group, and which blocks were stored under a cache salt (vLLM
// puts the salt in the first block's extra keys only, while the router
// salts every block of the sequence; children inherit their parent's
// salt). A Decoder is not safe for concurrent use; use one per stream.
type Decoder struct {
	cfg       Config
	p         *parser
	mainGroup int64
	salts     map[uint64]saltRef
	ids       []uint64
}

type saltRef struct {
	ns   string
	refs int32
}

// NewDecoder returns a decoder for cfg, which must be valid.
func NewDecoder(cfg Config) (*Decoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{cfg: cfg, p: newParser(cfg.Limits), salts: map[uint64]saltRef{}}, nil
}

// Reset forgets the stream's state; call it when the worker rank's blocks
// are cleared for any reason (restart, unrecoverable gap).
func (d *Decoder) Reset() {
	d.mainGroup = 0
	clear(d.salts)
}

// Decode parses and converts one payload. An error (wrapping ErrMalformed
// or ErrTooLarge) means the payload as a whole is unusable; otherwise bad
// events are listed in Result.Refused and the rest are returned.
func (d *Decoder) Decode(payload []byte) (Result, error) {
	b, err := d.p.batch(payload)
	if err != nil {
		return Result{}, fmt.Errorf("decoding vLLM event batch: %w", err)
	}
	return d.Convert(b), nil
}

// Convert validates and converts an already parsed batch.
func (d *Decoder) Convert(b RawBatch) Result {
	res := Result{TS: b.TS, DPRank: b.DPRank, Events: make([]kvevent.Event, 0, len(b.Events))}
	refuse := func(i int, tag string, r Reason, format string, args ...any) {
		res.Refused = append(res.Refused, Refusal{Index: i, Tag: tag, Reason: r, Detail: fmt.Sprintf(format, args...)})
	}
	for i, raw := range b.Events {
		switch e := raw.(type) {
		case BlockStored:
			ev, reason, detail := d.stored(&e)
			if reason != 0 {
				refuse(i, e.Tag(), reason, "%s", detail)
				continue
			}
			if len(ev.Blocks) > 0 {
				res.Events = append(res.Events, ev)
			}
		case BlockRemoved:
			if e.GroupIdx != nil && *e.GroupIdx != d.mainGroup {
				refuse(i, e.Tag(), ReasonFiltered, "group %d is not the main attention group %d", *e.GroupIdx, d.mainGroup)
				continue
			}
			if len(e.BlockHashes) == 0 {
				continue
			}
			ev := kvevent.Event{Worker: d.cfg.Worker, Tier: tier(e.Medium), Kind: kvevent.Removed,
				Removed: make([]uint64, len(e.BlockHashes))}
			for j, h := range e.BlockHashes {
				id := h.ID()
				ev.Removed[j] = id
				if s, ok := d.salts[id]; ok {
					if s.refs <= 1 {
						delete(d.salts, id)
					} else {
						s.refs--
						d.salts[id] = s
					}
				}
			}
			res.Events = append(res.Events, ev)
		case AllBlocksCleared:
			d.Reset()
			res.Events = append(res.Events, kvevent.Event{Worker: d.cfg.Worker, Kind: kvevent.Cleared})
		case MalformedEvent:
			r := ReasonMalformed
			if isTooLarge(e.Err) {
				r = ReasonTooLarge
			}
			refuse(i, e.Name, r, "%v", e.Err)
		case UnknownEvent:
			refuse(i, e.Name, ReasonUnknownType, "unknown event type %q", e.Name)
		default:
			refuse(i, raw.Tag(), ReasonUnknownType, "unsupported event %T", raw)
		}
	}
	return res
}

func tier(medium *string) kvevent.Tier {
	if medium == nil {
		return kvevent.TierDevice
	}
	return kvevent.TierFromMedium(*medium)
}

// mainKinds are the attention kinds whose blocks a prefix router indexes.
func mainKind(k string) bool {
	switch k {
	case "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// stored converts a BlockStored, or says why it is refused.
func (d *Decoder) stored(e *BlockStored) (kvevent.Event, Reason, string) {
	// Group filter: a spec kind, when present, decides; otherwise the group
	// index must be the main one (0 unless a main kind named another).
	if e.KVCacheSpecKind != nil {
		if !mainKind(*e.KVCacheSpecKind) {
			return kvevent.Event{}, ReasonFiltered, fmt.Sprintf("KV cache group kind %q is not main attention", *e.KVCacheSpecKind)
		}
		if e.GroupIdx != nil {
			d.mainGroup = *e.GroupIdx
		}
	} else if e.GroupIdx != nil && *e.GroupIdx != d.mainGroup {
		return kvevent.Event{}, ReasonFiltered, fmt.Sprintf("group %d is not the main attention group %d", *e.GroupIdx, d.mainGroup)
	}
	n := len(e.BlockHashes)
	if n == 0 {
		return kvevent.Event{}, 0, ""
	}
	bs := d.cfg.BlockSize
	if e.BlockSize != int64(bs) {
		return kvevent.Event{}, ReasonBlockSize, fmt.Sprintf("block size %d ≠ %d", e.BlockSize, bs)
	}
	toks := e.TokenIDs
	if e.Bigrams && len(toks) == n*bs+1 {
		toks = toks[:n*bs] // EAGLE: the trailing id only closes the last pair
	}
	if len(toks) != n*bs {
		return kvevent.Event{}, ReasonTokenCount, fmt.Sprintf("%d token ids for %d blocks of %d", len(e.TokenIDs), n, bs)
	}
	parent := e.ParentBlockHash.ID()
	hasParent := !e.ParentBlockHash.IsNil()
	d.ids = d.ids[:0]
	for _, h := range e.BlockHashes {
		id := h.ID()
		if hasParent && id == parent {
			return kvevent.Event{}, ReasonSelfReference, fmt.Sprintf("block %d is its own parent", id)
		}
		d.ids = append(d.ids, id)
	}
	if dup, ok := duplicate(d.ids); ok {
		return kvevent.Event{}, ReasonDuplicateHash, fmt.Sprintf("block %d appears twice", dup)
	}

	lora := ""
	if e.LoRAName != nil {
		lora = *e.LoRAName
	} else if e.LoRAID != nil && *e.LoRAID != 0 {
		// Only the deprecated id: a name nobody queries with, so these
		// blocks never match a base-model request.
		lora = fmt.Sprintf("lora_id:%d", *e.LoRAID)
	}
	salt := ""
	switch {
	case e.CacheSalt != nil:
		salt = *e.CacheSalt
	case hasParent:
		if len(d.salts) > 0 {
			salt = d.salts[parent].ns
		}
	case len(e.ExtraKeys) > 0:
		salt = saltOf(e.ExtraKeys[0], lora)
	}
	seed := kvhash.SaltedSeed(lora, salt)

	ev := kvevent.Event{Worker: d.cfg.Worker, Tier: tier(e.Medium), Kind: kvevent.Stored, LoRAName: loraName(e),
		HasParent: hasParent, Parent: parent, Blocks: make([]kvevent.Block, n)}
	for i := range n {
		blk := toks[i*bs : (i+1)*bs]
		var mm []uint64
		if i < len(e.ExtraKeys) {
			mm = mmHashes(e.ExtraKeys[i], lora, i == 0 && !hasParent)
		}
		ev.Blocks[i] = kvevent.Block{EngineHash: d.ids[i], LocalHash: kvhash.LocalHashMM(blk, mm, seed)}
	}
	if salt != "" {
		for _, id := range d.ids {
			s, ok := d.salts[id]
			if !ok && len(d.salts) >= d.cfg.MaxSaltedBlocks {
				continue
			}
			s.ns = salt
			s.refs++
			d.salts[id] = s
		}
	}
	return ev, 0, ""
}

// duplicate returns a hash that occurs twice in ids.
func duplicate(ids []uint64) (uint64, bool) {
	if len(ids) <= 32 {
		for i := 1; i < len(ids); i++ {
			for j := range i {
				if ids[i] == ids[j] {
					return ids[i], true
				}
			}
		}
		return 0, false
	}
	seen := make(map[uint64]struct{}, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; ok {
			return id, true
		}
		seen[id] = struct{}{}
	}
	return 0, false
}

func isTooLarge(err error) bool { return errors.Is(err, ErrTooLarge) }

// loraName is the event's adapter name as vLLM sent it ("" for none, or
// for the deprecated id alone: no name to route by).
func loraName(e *BlockStored) string {
	if e.LoRAName == nil {
		return ""
	}
	return *e.LoRAName
}
