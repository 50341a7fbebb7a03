package recovery

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/mpack"
	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed is wrapped by every decoding error caused by the input.
var ErrMalformed = errors.New("malformed recovery message")

// MaxMessageBytes bounds one encoded request or reply part accepted by the
// decoders (NATS's default max payload is 1 MiB; parts are cut well below).
const MaxMessageBytes = 64 << 20

// DefaultPartBytes is the default size a reply is cut at: well below NATS's
// default 1 MiB max payload.
const DefaultPartBytes = 512 << 10

// maxParts bounds the number of parts one reply may announce.
const maxParts = 1 << 16

func parseKind(s string) (Kind, bool) {
	for k := KindEvents; k <= KindError; k++ {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// EncodeRequest returns r as a msgpack map with named fields:
// {worker_id, dp_rank, start_event_id, end_event_id}, absent ends as nil.
func EncodeRequest(r Request) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	_ = e.EncodeMapLen(4)
	_ = e.EncodeString("worker_id")
	_ = e.EncodeUint(uint64(r.Worker.ID))
	_ = e.EncodeString("dp_rank")
	_ = e.EncodeUint(uint64(r.Worker.Rank))
	_ = e.EncodeString("start_event_id")
	encodeOptUint(e, r.HasStart, r.Start)
	_ = e.EncodeString("end_event_id")
	encodeOptUint(e, r.HasEnd, r.End)
	return buf.Bytes()
}

func encodeOptUint(e *msgpack.Encoder, has bool, v uint64) {
	if has {
		_ = e.EncodeUint(v)
	} else {
		_ = e.EncodeNil()
	}
}

// DecodeRequest decodes a request. Unknown fields are skipped, missing ones
// default (worker 0, rank 0, no start, no end).
func DecodeRequest(b []byte) (Request, error) {
	var r Request
	if len(b) > MaxMessageBytes {
		return r, fmt.Errorf("%w: request of %d bytes", ErrMalformed, len(b))
	}
	d := mpack.NewDecoder(b)
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return r, fmt.Errorf("%w: request is not a map", ErrMalformed)
	}
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return r, fmt.Errorf("%w: request key: %v", ErrMalformed, err)
		}
		switch key {
		case "worker_id":
			v, err := d.DecodeUint64()
			if err != nil {
				return r, fmt.Errorf("%w: worker_id: %v", ErrMalformed, err)
			}
			r.Worker.ID = kvevent.WorkerID(v)
		case "dp_rank":
			v, err := d.DecodeUint32()
			if err != nil {
				return r, fmt.Errorf("%w: dp_rank: %v", ErrMalformed, err)
			}
			r.Worker.Rank = kvevent.DPRank(v)
		case "start_event_id":
			if r.HasStart, r.Start, err = decodeOptUint(d); err != nil {
				return r, fmt.Errorf("%w: start_event_id: %v", ErrMalformed, err)
			}
		case "end_event_id":
			if r.HasEnd, r.End, err = decodeOptUint(d); err != nil {
				return r, fmt.Errorf("%w: end_event_id: %v", ErrMalformed, err)
			}
		default:
			if err := d.Skip(); err != nil {
				return r, fmt.Errorf("%w: skipping %q: %v", ErrMalformed, key, err)
			}
		}
	}
	return r, nil
}

func decodeOptUint(d *mpack.Decoder) (bool, uint64, error) {
	if null, err := d.IsNil(); err != nil || null {
		return false, 0, err
	}
	v, err := d.DecodeUint64()
	return err == nil, v, err
}

// Part is one message of a reply split for transport: part Index of Count
// (0-based), carrying a slice of the reply's events and, in every part, the
// reply's other fields.
type Part struct {
	Reply
	// Index is this part's position, 0-based.
	Index int
	// Count is the number of parts of the reply (at least 1).
	Count int
}

// EncodeReply encodes r as one or more parts of about partBytes each
// (DefaultPartBytes when <= 0); every part is a msgpack map
// {kind, part, parts, events: [bin RouterEvent...], last_event_id,
// newest_available, start_event_id, end_event_id, error, publisher_id}. An event that
// cannot be encoded (unknown kind or tier) fails the whole reply.
func EncodeReply(r Reply, partBytes int) ([][]byte, error) {
	if partBytes <= 0 {
		partBytes = DefaultPartBytes
	}
	var chunks [][][]byte
	var cur [][]byte
	size := 0
	for _, ev := range r.Events {
		b, err := dynamo.EncodeEvent(ev)
		if err != nil {
			return nil, fmt.Errorf("encoding reply event %d: %w", ev.ID, err)
		}
		if len(cur) > 0 && size+len(b) > partBytes {
			chunks = append(chunks, cur)
			cur, size = nil, 0
		}
		cur = append(cur, b)
		size += len(b) + 5
	}
	chunks = append(chunks, cur)
	out := make([][]byte, len(chunks))
	for i, evs := range chunks {
		out[i] = encodePart(r, i, len(chunks), evs)
	}
	return out, nil
}

func encodePart(r Reply, idx, count int, evs [][]byte) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	_ = e.EncodeMapLen(10)
	_ = e.EncodeString("kind")
	_ = e.EncodeString(r.Kind.String())
	_ = e.EncodeString("part")
	_ = e.EncodeUint(uint64(idx))
	_ = e.EncodeString("parts")
	_ = e.EncodeUint(uint64(count))
	_ = e.EncodeString("events")
	_ = e.EncodeArrayLen(len(evs))
	for _, b := range evs {
		_ = e.EncodeBytes(b)
	}
	_ = e.EncodeString("last_event_id")
	encodeOptUint(e, !r.NoEvents, r.LastEventID)
	_ = e.EncodeString("newest_available")
	_ = e.EncodeUint(r.NewestAvailable)
	_ = e.EncodeString("start_event_id")
	_ = e.EncodeUint(r.Start)
	_ = e.EncodeString("end_event_id")
	_ = e.EncodeUint(r.End)
	_ = e.EncodeString("error")
	_ = e.EncodeString(r.Err)
	_ = e.EncodeString("publisher_id")
	_ = e.EncodeUint(r.PublisherID)
	return buf.Bytes()
}

// DecodePart decodes one reply part. Unknown fields are skipped; kind is
// required; part and parts default to 0 and 1; every event must decode.
func DecodePart(b []byte) (Part, error) {
	p := Part{Count: 1}
	if len(b) > MaxMessageBytes {
		return p, fmt.Errorf("%w: reply part of %d bytes", ErrMalformed, len(b))
	}
	d := mpack.NewDecoder(b)
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return p, fmt.Errorf("%w: reply is not a map", ErrMalformed)
	}
	bad := func(field string, err error) (Part, error) {
		return p, fmt.Errorf("%w: %s: %v", ErrMalformed, field, err)
	}
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return bad("key", err)
		}
		switch key {
		case "kind":
			s, err := d.DecodeString()
			if err != nil {
				return bad(key, err)
			}
			k, ok := parseKind(s)
			if !ok {
				return bad(key, fmt.Errorf("unknown kind %q", s))
			}
			p.Kind = k
		case "part", "parts":
			v, err := d.DecodeUint64()
			if err != nil {
				return bad(key, err)
			}
			if v > maxParts {
				return bad(key, fmt.Errorf("%d out of range", v))
			}
			if key == "part" {
				p.Index = int(v)
			} else {
				p.Count = int(v)
			}
		case "events":
			if p.Events, err = dynamo.DecodeEventArray(d); err != nil {
				return bad(key, err)
			}
		case "last_event_id":
			has, v, err := decodeOptUint(d)
			if err != nil {
				return bad(key, err)
			}
			p.LastEventID, p.NoEvents = v, !has
		case "newest_available", "start_event_id", "end_event_id", "publisher_id":
			v, err := d.DecodeUint64()
			if err != nil {
				return bad(key, err)
			}
			switch key {
			case "newest_available":
				p.NewestAvailable = v
			case "start_event_id":
				p.Start = v
			case "publisher_id":
				p.PublisherID = v
			default:
				p.End = v
			}
		case "error":
			if p.Err, err = d.DecodeString(); err != nil {
				return bad(key, err)
			}
		default:
			if err := d.Skip(); err != nil {
				return bad("skipping "+key, err)
			}
		}
	}
	switch {
	case p.Kind == 0:
		return p, fmt.Errorf("%w: reply without kind", ErrMalformed)
	case p.Count < 1 || p.Index >= p.Count:
		return p, fmt.Errorf("%w: part %d of %d", ErrMalformed, p.Index, p.Count)
	}
	return p, nil
}

// Assembler joins a reply's parts, which must arrive in order (both
// transports keep per-sender order).
type Assembler struct {
	r     Reply
	next  int
	count int
}

// Add adds the next part; it reports whether the reply is complete. A part
// out of order, or disagreeing with the first on kind or count, is an error.
func (a *Assembler) Add(p Part) (bool, error) {
	if a.next == 0 {
		a.count = p.Count
		a.r = p.Reply
		a.r.Events = nil
	}
	if p.Index != a.next || p.Count != a.count || p.Kind != a.r.Kind {
		return false, fmt.Errorf("%w: got part %d/%d (%v), want %d/%d (%v)", ErrMalformed,
			p.Index, p.Count, p.Kind, a.next, a.count, a.r.Kind)
	}
	a.r.Events = append(a.r.Events, p.Events...)
	a.next++
	return a.next == a.count, nil
}

// AddEncoded decodes one part as it came off a transport (DecodePart) and
// adds it (Add).
func (a *Assembler) AddEncoded(b []byte) (bool, error) {
	p, err := DecodePart(b)
	if err != nil {
		return false, err
	}
	return a.Add(p)
}

// Reply returns the assembled reply (complete once Add reported true).
func (a *Assembler) Reply() Reply { return a.r }
