package dynamo

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mpack"
)

// Envelope is Dynamo's event-plane envelope, which wraps every message a
// Dynamo component publishes: the publisher's identity and per-publisher
// sequence (for de-duplication across brokers) around an opaque payload,
// here a msgpack RouterEvent.
type Envelope struct {
	// Topic is the topic the event was published to, e.g. "kv-events".
	Topic string
	// PublisherID identifies the publisher (Dynamo masks it to 2^53-1).
	PublisherID uint64
	// Sequence counts up by one per message of this publisher.
	Sequence uint64
	// PublishedAtMs is the Unix publish time in milliseconds.
	PublishedAtMs uint64
	// PublishedAtNs is the Unix publish time in nanoseconds (newer
	// publishers only; 0 when absent).
	PublishedAtNs uint64
	// Payload is the wrapped message, a msgpack RouterEvent for KV events.
	Payload []byte
}

// Envelope field names as Dynamo's serde writes them.
const (
	keyTopic         = "topic"
	keyPublisherID   = "publisher_id"
	keySequence      = "sequence"
	keyPublishedAt   = "published_at"
	keyPublishedAtNs = "published_at_ns"
	keyPayload       = "payload"
)

// KVEventTopic is the topic Dynamo publishes KV events on.
const KVEventTopic = "kv-events"

// AppendEnvelope appends env as msgpack with named fields, the payload as a
// bin value (what Dynamo's serialize_bytes helper writes).
func AppendEnvelope(dst []byte, env Envelope) []byte {
	b := appendMapLen(dst, 6)
	b = appendStr(b, keyTopic)
	b = appendStr(b, env.Topic)
	b = appendStr(b, keyPublisherID)
	b = appendUint(b, env.PublisherID)
	b = appendStr(b, keySequence)
	b = appendUint(b, env.Sequence)
	b = appendStr(b, keyPublishedAt)
	b = appendUint(b, env.PublishedAtMs)
	b = appendStr(b, keyPublishedAtNs)
	b = appendUint(b, env.PublishedAtNs)
	b = appendStr(b, keyPayload)
	return appendBin(b, env.Payload)
}

// EncodeEnvelope returns env as msgpack (see AppendEnvelope).
func EncodeEnvelope(env Envelope) []byte {
	return AppendEnvelope(make([]byte, 0, 96+len(env.Topic)+len(env.Payload)), env)
}

// EncodeEventInEnvelope encodes ev as a RouterEvent and wraps it in env
// (whose Payload is replaced).
func EncodeEventInEnvelope(env Envelope, ev kvevent.Event) ([]byte, error) {
	p, err := EncodeEvent(ev)
	if err != nil {
		return nil, err
	}
	env.Payload = p
	return EncodeEnvelope(env), nil
}

// DecodeEnvelope decodes a msgpack envelope. Payload may be bin, str or an
// array of bytes; unknown fields are skipped; payload is required.
func DecodeEnvelope(b []byte) (Envelope, error) {
	r := mpack.NewReader(b)
	env, err := decodeEnvelope(r)
	if err == nil && r.Remaining() != 0 {
		err = fmt.Errorf("%d trailing bytes", r.Remaining())
	}
	if err != nil {
		return Envelope{}, wrapMalformed("decoding dynamo envelope", err)
	}
	return env, nil
}

func decodeEnvelope(r *mpack.Reader) (Envelope, error) {
	var env Envelope
	n, err := r.MapLen()
	if err != nil {
		return env, err
	}
	havePayload := false
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return env, fmt.Errorf("field name: %w", err)
		}
		switch string(k) {
		case keyTopic:
			var s []byte
			if s, err = r.StrBytes(); err == nil {
				env.Topic = string(s)
			}
		case keyPublisherID:
			env.PublisherID, err = r.Uint(math.MaxUint64)
		case keySequence:
			env.Sequence, err = r.Uint(math.MaxUint64)
		case keyPublishedAt:
			env.PublishedAtMs, err = r.Uint(math.MaxUint64)
		case keyPublishedAtNs:
			env.PublishedAtNs, err = r.Uint(math.MaxUint64)
		case keyPayload:
			env.Payload, err = binOrStr(r)
			havePayload = true
		default:
			err = r.Skip()
		}
		if err != nil {
			return env, fmt.Errorf("field %q: %w", k, err)
		}
	}
	if !havePayload {
		return env, errors.New("missing payload")
	}
	return env, nil
}

// Decode decodes a KV event message as it arrives on the event-plane
// subject: either a bare msgpack RouterEvent or one wrapped in an Envelope
// (told apart by the top-level "payload" field). The envelope is returned
// when there was one, nil otherwise.
func Decode(b []byte) (kvevent.Event, *Envelope, error) {
	wrapped, err := hasPayloadField(b)
	if err != nil {
		return kvevent.Event{}, nil, wrapMalformed("decoding dynamo kv event message", err)
	}
	if !wrapped {
		ev, err := DecodeEvent(b)
		return ev, nil, err
	}
	env, err := DecodeEnvelope(b)
	if err != nil {
		return kvevent.Event{}, nil, err
	}
	ev, err := DecodeEvent(env.Payload)
	if err != nil {
		return kvevent.Event{}, nil, fmt.Errorf("envelope from publisher %d seq %d: %w", env.PublisherID, env.Sequence, err)
	}
	return ev, &env, nil
}

// hasPayloadField reports whether b is a map with a top-level "payload" key.
func hasPayloadField(b []byte) (bool, error) {
	r := mpack.NewReader(b)
	n, err := r.MapLen()
	if err != nil {
		return false, err
	}
	for range n {
		k, err := r.StrBytes()
		if err != nil {
			return false, fmt.Errorf("field name: %w", err)
		}
		if string(k) == keyPayload {
			return true, nil
		}
		if err := r.Skip(); err != nil {
			return false, err
		}
	}
	return false, nil
}
