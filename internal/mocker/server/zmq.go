package server

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
	"github.com/kvrouter/kvrouter/internal/mocker"
)

// ZMQOptions choose the wire shape of the ZMQ event stream, so routers can
// be tested against every vLLM era.
type ZMQOptions struct {
	// Format is the payload encoding: tagged maps (current vLLM) or tagged
	// arrays of a Schema (older vLLM, SGLang).
	Format vllm.Format
	// ReplayFormat is the replay reply shape: with topic frame (current
	// vLLM) or legacy.
	ReplayFormat vllmzmq.ReplayFormat
}

// ParseZMQOptions reads the encoding ("map" or "array"), the array schema
// name (empty: newest) and the replay format ("topic" or "legacy").
func ParseZMQOptions(encoding, schema, replay string) (ZMQOptions, error) {
	var o ZMQOptions
	var err error
	if o.Format.Encoding, err = vllm.ParseEncoding(encoding); err != nil {
		return o, err
	}
	if schema != "" {
		if o.Format.Schema, err = vllm.ParseSchema(schema); err != nil {
			return o, err
		}
	}
	switch replay {
	case "", "topic":
		o.ReplayFormat = vllmzmq.ReplayTopic
	case "legacy":
		o.ReplayFormat = vllmzmq.ReplayLegacy
	default:
		return o, fmt.Errorf("unknown replay format %q (want topic or legacy)", replay)
	}
	return o, nil
}

// ZMQSink publishes a worker's event batches in vLLM's ZMQ format: one PUB
// (+ optional replay ROUTER) per data-parallel rank, rank r on the
// configured ports + portOffset + r.
type ZMQSink struct {
	pubs []*vllmzmq.Publisher
	once sync.Once
}

var _ EventSink = (*ZMQSink)(nil)

// NewZMQSink binds the publishers of ranks 0..ranks-1.
func NewZMQSink(c KVEventsConfig, o ZMQOptions, portOffset, ranks int, log *slog.Logger) (*ZMQSink, error) {
	s := &ZMQSink{}
	for r := range ranks {
		ep, err := OffsetEndpoint(c.Endpoint, portOffset+r)
		if err != nil {
			s.Close()
			return nil, err
		}
		rep := ""
		if c.ReplayEndpoint != "" {
			if rep, err = OffsetEndpoint(c.ReplayEndpoint, portOffset+r); err != nil {
				s.Close()
				return nil, err
			}
		}
		p, err := vllmzmq.NewPublisher(vllmzmq.PublisherConfig{Endpoint: ep, ReplayEndpoint: rep, Topic: c.Topic,
			BufferSteps: c.BufferSteps, HWM: c.HWM, ReplayFormat: o.ReplayFormat, Format: o.Format,
			DPRank: int64(r), Logger: log})
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("kv events publisher of rank %d on %s: %w", r, ep, err)
		}
		s.pubs = append(s.pubs, p)
	}
	return s, nil
}

// Endpoint returns rank's bound live endpoint ("" for an unknown rank).
func (s *ZMQSink) Endpoint(rank int) string {
	if rank < 0 || rank >= len(s.pubs) {
		return ""
	}
	return s.pubs[rank].Endpoint()
}

// ReplayEndpoint returns rank's bound replay endpoint, "" if none.
func (s *ZMQSink) ReplayEndpoint(rank int) string {
	if rank < 0 || rank >= len(s.pubs) {
		return ""
	}
	return s.pubs[rank].ReplayEndpoint()
}

// Publish encodes and sends one batch on its rank's publisher.
func (s *ZMQSink) Publish(b Batch, d Delivery) error {
	if b.Rank < 0 || b.Rank >= len(s.pubs) {
		return fmt.Errorf("no publisher for rank %d", b.Rank)
	}
	f := vllmzmq.FaultNone
	switch d {
	case DropLive:
		f = vllmzmq.FaultDropLive
	case Duplicate:
		f = vllmzmq.FaultDuplicate
	}
	_, err := s.pubs[b.Rank].PublishFault(RawBatch(b), f)
	return err
}

// Restart restarts rank's sequence at 0, as an engine restart does.
func (s *ZMQSink) Restart(rank int) {
	if rank >= 0 && rank < len(s.pubs) {
		s.pubs[rank].Restart()
	}
}

// Close closes every publisher; later calls do nothing.
func (s *ZMQSink) Close() error {
	var err error
	s.once.Do(func() {
		for _, p := range s.pubs {
			err = errors.Join(err, p.Close())
		}
	})
	return err
}

// RawBatch converts a batch to vLLM's wire model: engine hashes as unsigned
// ints (vLLM's default), medium "GPU" or "CPU", one nil extra key per block,
// group 0 of kind full_attention, as a current vLLM writes them.
func RawBatch(b Batch) vllm.RawBatch {
	rank := int64(b.Rank)
	out := vllm.RawBatch{TS: float64(b.TS.UnixNano()) / 1e9, DPRank: &rank, Events: make([]vllm.RawEvent, 0, len(b.Events))}
	for _, e := range b.Events {
		out.Events = append(out.Events, rawEvent(e))
	}
	return out
}

func medium(t kvevent.Tier) *string {
	if t == kvevent.TierHostPinned {
		return vllm.Str("CPU")
	}
	return vllm.Str("GPU")
}

func rawEvent(e mocker.Event) vllm.RawEvent {
	switch e.Kind {
	case kvevent.Stored:
		s := vllm.BlockStored{BlockHashes: hashes(e.Hashes), TokenIDs: e.Tokens, BlockSize: int64(e.BlockSize),
			Medium: medium(e.Tier), ExtraKeys: make([]vllm.ExtraKey, len(e.Hashes)), GroupIdx: vllm.Int(0),
			KVCacheSpecKind: vllm.Str("full_attention")}
		if e.HasParent {
			s.ParentBlockHash = vllm.UintHash(e.Parent)
		}
		if e.LoRAName != "" {
			// vLLM: the adapter's name, and first in every block's extra keys.
			s.LoRAName = vllm.Str(e.LoRAName)
			for i := range s.ExtraKeys {
				s.ExtraKeys[i] = vllm.ExtraKey{e.LoRAName}
			}
		}
		if e.CacheSalt != "" && !e.HasParent && len(s.ExtraKeys) > 0 {
			// vLLM: the salt ends the first block's extra keys only.
			s.ExtraKeys[0] = append(s.ExtraKeys[0], e.CacheSalt)
		}
		return s
	case kvevent.Removed:
		return vllm.BlockRemoved{BlockHashes: hashes(e.Hashes), Medium: medium(e.Tier), GroupIdx: vllm.Int(0)}
	}
	return vllm.AllBlocksCleared{}
}

func hashes(hs []uint64) []vllm.Hash {
	out := make([]vllm.Hash, len(hs))
	for i, h := range hs {
		out[i] = vllm.UintHash(h)
	}
	return out
}
