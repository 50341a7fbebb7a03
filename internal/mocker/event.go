package mocker

import (
	"slices"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

// Event is one KV cache event of an engine rank, in engine terms: block
// hashes are the engine's own opaque ids (see EngineHash), never the
// router's. Adapters turn it into a wire format (vLLM msgpack, Dynamo).
type Event struct {
	// Kind is Stored, Removed or Cleared.
	Kind kvevent.Kind
	// Tier is where the blocks live: TierDevice ("GPU") or TierHostPinned
	// ("CPU").
	Tier kvevent.Tier
	// Hashes are the engine hashes of the stored blocks, in chain order, or
	// of the removed blocks.
	Hashes []uint64
	// HasParent is true when the first stored block has a parent.
	HasParent bool
	// Parent is the engine hash of the first stored block's parent.
	Parent uint64
	// Tokens are the token ids of the stored blocks, BlockSize per block.
	Tokens []uint32
	// BlockSize is the number of tokens per block.
	BlockSize int
	// LoRAName is the LoRA adapter the stored blocks were computed with
	// ("" none).
	LoRAName string
	// CacheSalt is the cache_salt of the request that computed them ("" none).
	CacheSalt string
}

// eventLog collects one step's events in the order the pool changed. Hashes
// and tokens go to per-step arenas; events keep offsets while the step runs
// and become slices in finish, valid until the next step.
type eventLog struct {
	recs    []eventRec
	events  []Event
	hashes  []uint64
	tokens  []uint32
	bs      int
	enabled bool
}

type eventRec struct {
	kind      kvevent.Kind
	tier      kvevent.Tier
	hasParent bool
	parent    uint64
	h0, h1    int // hashes[h0:h1]
	t0, t1    int // tokens[t0:t1]
	salt      blockSalt
}

func (l *eventLog) reset() {
	l.recs = l.recs[:0]
	l.hashes = l.hashes[:0]
	l.tokens = l.tokens[:0]
}

// removed records a removed block, merged into the previous event when
// that one is a removal on the same tier.
func (l *eventLog) removed(h uint64, tier kvevent.Tier) {
	if !l.enabled {
		return
	}
	l.hashes = append(l.hashes, h)
	if n := len(l.recs); n > 0 {
		last := &l.recs[n-1]
		if last.kind == kvevent.Removed && last.tier == tier && last.h1 == len(l.hashes)-1 {
			last.h1++
			return
		}
	}
	l.recs = append(l.recs, eventRec{kind: kvevent.Removed, tier: tier, h0: len(l.hashes) - 1, h1: len(l.hashes)})
}

// stored records one stored block, appended to the previous event when
// that one is a store on the same tier ending with this block's parent.
func (l *eventLog) stored(tier kvevent.Tier, h, parent uint64, hasParent bool, tokens []uint32, s blockSalt) {
	if !l.enabled {
		return
	}
	l.hashes = append(l.hashes, h)
	l.tokens = append(l.tokens, tokens...)
	if n := len(l.recs); n > 0 && hasParent {
		last := &l.recs[n-1]
		if last.kind == kvevent.Stored && last.tier == tier && last.salt == s && last.h1 == len(l.hashes)-1 &&
			l.hashes[last.h1-1] == parent && last.t1 == len(l.tokens)-len(tokens) {
			last.h1++
			last.t1 = len(l.tokens)
			return
		}
	}
	l.recs = append(l.recs, eventRec{kind: kvevent.Stored, tier: tier, hasParent: hasParent, parent: parent,
		h0: len(l.hashes) - 1, h1: len(l.hashes), t0: len(l.tokens) - len(tokens), t1: len(l.tokens), salt: s})
}

func (l *eventLog) cleared() {
	if l.enabled {
		l.recs = append(l.recs, eventRec{kind: kvevent.Cleared})
	}
}

// finish turns the step's records into events.
func (l *eventLog) finish() []Event {
	l.events = l.events[:0]
	for _, r := range l.recs {
		e := Event{Kind: r.kind, Tier: r.tier, HasParent: r.hasParent, Parent: r.parent, BlockSize: l.bs, LoRAName: r.salt.lora, CacheSalt: r.salt.cache}
		if r.h1 > r.h0 {
			e.Hashes = l.hashes[r.h0:r.h1:r.h1]
		}
		if r.t1 > r.t0 {
			e.Tokens = l.tokens[r.t0:r.t1:r.t1]
		}
		l.events = append(l.events, e)
	}
	return l.events
}

// KVEvent converts the event to the router's engine-neutral model for a
// worker rank: stored blocks get their local hash computed from their
// tokens (kvhash, salted with the LoRA name and cache salt), as a router does on receipt. The result owns
// its slices.
func (e Event) KVEvent(w kvevent.WorkerRank) kvevent.Event {
	out := kvevent.Event{Worker: w, Tier: e.Tier, Kind: e.Kind, HasParent: e.HasParent, Parent: e.Parent, LoRAName: e.LoRAName}
	switch e.Kind {
	case kvevent.Stored:
		out.Blocks = make([]kvevent.Block, len(e.Hashes))
		for i, h := range e.Hashes {
			var local uint64
			if e.BlockSize > 0 && (i+1)*e.BlockSize <= len(e.Tokens) {
				local = kvhash.LocalHash(e.Tokens[i*e.BlockSize:(i+1)*e.BlockSize], kvhash.SaltedSeed(e.LoRAName, e.CacheSalt))
			}
			out.Blocks[i] = kvevent.Block{EngineHash: h, LocalHash: local}
		}
	case kvevent.Removed:
		out.Removed = slices.Clone(e.Hashes)
	}
	return out
}
