package replica

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mpack"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Wire limits: a decoder refuses anything larger.
const (
	// MaxBlocks is the most block hashes one AddRequest may carry (a 2 M
	// token prompt at block size 16).
	MaxBlocks = 1 << 17
	// MaxRequestID is the longest request id accepted, in bytes.
	MaxRequestID = 1024
	// MaxChunkEvents is the most events one snapshot chunk may carry.
	MaxChunkEvents = 1 << 16
	// MaxModel is the longest model name accepted, in bytes.
	MaxModel = 1024
)

// ErrMalformed wraps every reason a payload is refused.
var ErrMalformed = errors.New("malformed replica payload")

// Data variant names on the wire (serde's externally tagged enum, as
// Dynamo's ActiveSequenceEvent encodes them).
const (
	tagAdd  = "AddRequest"
	tagMark = "MarkPrefillCompleted"
	tagFree = "Free"
)

// AppendEvent appends the msgpack encoding of ev (named fields, see
// docs/events.md "Replica sync"; "epoch" and "seq" are written only for
// a sequenced event) to dst.
func AppendEvent(dst []byte, ev Event) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	e := msgpack.NewEncoder(&buf)
	if err := encodeEvent(e, ev); err != nil {
		return dst, err
	}
	return buf.Bytes(), nil
}

func encodeEvent(e *msgpack.Encoder, ev Event) error {
	var tag string
	switch ev.Kind {
	case router.AddRequest:
		tag = tagAdd
	case router.MarkPrefillCompleted:
		tag = tagMark
	case router.Free:
		tag = tagFree
	default:
		return fmt.Errorf("encoding lifecycle event: unknown kind %d", ev.Kind)
	}
	// Errors of a bytes.Buffer writer cannot happen; the last one is kept.
	var err error
	keep := func(e error) {
		if e != nil {
			err = e
		}
	}
	fields := 4
	if ev.Seq != 0 {
		fields += 2
	}
	if ev.Model != "" {
		fields++
	}
	keep(e.EncodeMapLen(fields))
	if ev.Model != "" { // absent: the default model's pool
		keep(e.EncodeString("model"))
		keep(e.EncodeString(ev.Model))
	}
	if ev.Seq != 0 {
		keep(e.EncodeString("epoch"))
		keep(e.EncodeUint(ev.Epoch))
		keep(e.EncodeString("seq"))
		keep(e.EncodeUint(ev.Seq))
	}
	keep(e.EncodeString("request_id"))
	keep(e.EncodeString(ev.RequestID))
	keep(e.EncodeString("worker"))
	encodeWorker(e, keep, ev.Worker)
	keep(e.EncodeString("router_id"))
	keep(e.EncodeUint(ev.RouterID))
	keep(e.EncodeString("data"))
	if ev.Kind != router.AddRequest {
		keep(e.EncodeString(tag))
		return err
	}
	keep(e.EncodeMapLen(1))
	keep(e.EncodeString(tagAdd))
	keep(e.EncodeMapLen(4))
	keep(e.EncodeString("token_sequence"))
	keep(e.EncodeArrayLen(len(ev.BlockHashes)))
	for _, h := range ev.BlockHashes {
		keep(e.EncodeUint(h))
	}
	keep(e.EncodeString("prefill_tokens"))
	keep(e.EncodeUint(uint64(max(ev.PrefillTokens, 0))))
	keep(e.EncodeString("expected_output_tokens"))
	if ev.ExpectedOutputTokens > 0 {
		keep(e.EncodeUint(uint64(ev.ExpectedOutputTokens)))
	} else {
		keep(e.EncodeNil())
	}
	keep(e.EncodeString("private"))
	keep(e.EncodeBool(ev.Private))
	return err
}

// DecodeEvent decodes one lifecycle event. Unknown fields are skipped,
// optional ones (epoch, seq and model included) may be missing; request_id,
// router_id and data are required. Errors wrap ErrMalformed.
func DecodeEvent(b []byte) (Event, error) {
	d := mpack.NewDecoder(b)
	ev, err := decodeEvent(d)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return ev, nil
}

// encodeWorker writes w as the map {worker_id, dp_rank} that decodeWorker
// reads, passing each encoder error to keep.
func encodeWorker(e *msgpack.Encoder, keep func(error), w kvevent.WorkerRank) {
	keep(e.EncodeMapLen(2))
	keep(e.EncodeString("worker_id"))
	keep(e.EncodeUint(uint64(w.ID)))
	keep(e.EncodeString("dp_rank"))
	keep(e.EncodeUint(uint64(w.Rank)))
}

func decodeEvent(d *mpack.Decoder) (Event, error) {
	var ev Event
	n, err := d.MapLen()
	if err != nil {
		return ev, fmt.Errorf("event: %w", err)
	}
	var haveID, haveRouter bool
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return ev, fmt.Errorf("event key: %w", err)
		}
		switch k {
		case "request_id":
			if ev.RequestID, err = d.DecodeString(); err == nil && len(ev.RequestID) > MaxRequestID {
				err = fmt.Errorf("%d bytes, max %d", len(ev.RequestID), MaxRequestID)
			}
			haveID = err == nil
		case "router_id":
			ev.RouterID, err = d.DecodeUint64()
			haveRouter = err == nil
		case "model":
			if ev.Model, err = d.DecodeString(); err == nil && len(ev.Model) > MaxModel {
				err = fmt.Errorf("%d bytes, max %d", len(ev.Model), MaxModel)
			}
		case "epoch":
			ev.Epoch, err = decodePosition(d)
		case "seq":
			ev.Seq, err = decodePosition(d)
		case "worker":
			ev.Worker, err = decodeWorker(d)
		case "data":
			err = decodeData(d, &ev.LifecycleEvent)
		default:
			err = d.Skip()
		}
		if err != nil {
			return ev, fmt.Errorf("event field %q: %w", k, err)
		}
	}
	switch {
	case !haveID || ev.RequestID == "":
		return ev, errors.New("event without request_id")
	case !haveRouter:
		return ev, errors.New("event without router_id")
	case ev.Kind == 0:
		return ev, errors.New("event without data")
	case ev.Seq == 0:
		ev.Epoch = 0 // an epoch means nothing without a sequence number
	}
	return ev, nil
}

func decodeWorker(d *mpack.Decoder) (kvevent.WorkerRank, error) {
	var w kvevent.WorkerRank
	n, err := d.MapLen()
	if err != nil {
		return w, err
	}
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return w, err
		}
		switch k {
		case "worker_id":
			var v uint64
			v, err = d.DecodeUint64()
			w.ID = kvevent.WorkerID(v)
		case "dp_rank":
			var v uint64
			if v, err = d.DecodeUint64(); err == nil && v > 1<<31 {
				err = fmt.Errorf("dp_rank %d out of range", v)
			}
			w.Rank = kvevent.DPRank(v)
		default:
			err = d.Skip()
		}
		if err != nil {
			return w, fmt.Errorf("%s: %w", k, err)
		}
	}
	return w, nil
}

// decodeData reads the data variant: a bare string for the unit variants,
// or a one-entry map {variant: body} (a nil body for unit variants).
func decodeData(d *mpack.Decoder, ev *router.LifecycleEvent) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	if msgpcode.IsString(c) {
		tag, err := d.DecodeString()
		if err != nil {
			return err
		}
		switch tag {
		case tagMark:
			ev.Kind = router.MarkPrefillCompleted
		case tagFree:
			ev.Kind = router.Free
		default:
			return fmt.Errorf("unknown variant %q", tag)
		}
		return nil
	}
	n, err := d.MapLen()
	if err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("variant map with %d entries", n)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return err
	}
	switch tag {
	case tagAdd:
		ev.Kind = router.AddRequest
		return decodeAdd(d, ev)
	case tagMark:
		ev.Kind = router.MarkPrefillCompleted
	case tagFree:
		ev.Kind = router.Free
	default:
		return fmt.Errorf("unknown variant %q", tag)
	}
	return d.Skip()
}

func decodeAdd(d *mpack.Decoder, ev *router.LifecycleEvent) error {
	n, err := d.MapLen()
	if err != nil {
		return err
	}
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return err
		}
		switch k {
		case "token_sequence":
			ev.BlockHashes, err = decodeHashes(d)
		case "prefill_tokens":
			ev.PrefillTokens, err = decodeCount(d)
		case "expected_output_tokens":
			ev.ExpectedOutputTokens, err = decodeCount(d)
		case "private":
			var nil_ bool
			if nil_, err = d.IsNil(); err == nil && !nil_ {
				ev.Private, err = d.DecodeBool()
			}
		default:
			err = d.Skip()
		}
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
	}
	return nil
}

func decodeHashes(d *mpack.Decoder) ([]uint64, error) {
	// ArrayLen reads nil as empty and checks n against the bytes present.
	n, err := d.ArrayLen(MaxBlocks)
	if err != nil || n == 0 {
		return nil, err
	}
	out := make([]uint64, 0, n)
	for range n {
		h, err := d.Hash()
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// decodePosition reads an epoch or sequence number: an unsigned integer
// (a signed encoding of a non-negative one is accepted; a negative one
// would wrap to a huge position and make every later event look stale).
func decodePosition(d *mpack.Decoder) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsFixedNum(c) && int8(c) < 0 || c == msgpcode.Int8 || c == msgpcode.Int16 || c == msgpcode.Int32 || c == msgpcode.Int64 {
		v, err := d.DecodeInt64()
		if err == nil && v < 0 {
			err = fmt.Errorf("negative position %d", v)
		}
		return uint64(v), err
	}
	return d.DecodeUint64()
}

// decodeCount reads an optional non-negative count (nil is 0).
func decodeCount(d *mpack.Decoder) (int, error) {
	if null, err := d.IsNil(); err != nil || null {
		return 0, err
	}
	v, err := d.DecodeInt64()
	if err != nil {
		return 0, err
	}
	if v < 0 || v > 1<<40 {
		return 0, fmt.Errorf("count %d out of range", v)
	}
	return int(v), nil
}

// Chunk is one message of a snapshot reply: part of a router's own
// bookings, as lifecycle events that rebuild them (AddRequest, then
// MarkPrefillCompleted for requests past their prefill). A snapshot
// request is a Chunk too, without events: the requester's id and stream
// position.
type Chunk struct {
	// RouterID is the router whose bookings (or request) these are.
	RouterID uint64
	// Epoch and Seq are the sender's stream position: in a reply, the
	// bookings reflect every event of that incarnation up to Seq
	// included; in a request, the requester's latest event. Both 0 when
	// the sender does not number its events.
	Epoch, Seq uint64
	// Last is true on the final chunk of the reply.
	Last bool
	// Events are the bookings (their Epoch and Seq are not sent).
	Events []router.LifecycleEvent
}

// AppendChunk appends the msgpack encoding of c to dst.
func AppendChunk(dst []byte, c Chunk) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	e := msgpack.NewEncoder(&buf)
	var err error
	keep := func(e error) {
		if e != nil {
			err = e
		}
	}
	keep(e.EncodeMapLen(5))
	keep(e.EncodeString("router_id"))
	keep(e.EncodeUint(c.RouterID))
	keep(e.EncodeString("epoch"))
	keep(e.EncodeUint(c.Epoch))
	keep(e.EncodeString("seq"))
	keep(e.EncodeUint(c.Seq))
	keep(e.EncodeString("last"))
	keep(e.EncodeBool(c.Last))
	keep(e.EncodeString("events"))
	keep(e.EncodeArrayLen(len(c.Events)))
	for _, ev := range c.Events {
		keep(encodeEvent(e, Event{LifecycleEvent: ev}))
	}
	if err != nil {
		return dst, fmt.Errorf("encoding snapshot chunk: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeChunk decodes a snapshot chunk. Errors wrap ErrMalformed.
func DecodeChunk(b []byte) (Chunk, error) {
	d := mpack.NewDecoder(b)
	c, err := decodeChunk(d)
	if err != nil {
		return Chunk{}, fmt.Errorf("%w: snapshot chunk: %w", ErrMalformed, err)
	}
	return c, nil
}

func decodeChunk(d *mpack.Decoder) (Chunk, error) {
	var c Chunk
	n, err := d.MapLen()
	if err != nil {
		return c, err
	}
	haveRouter := false
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return c, err
		}
		switch k {
		case "router_id":
			c.RouterID, err = d.DecodeUint64()
			haveRouter = err == nil
		case "epoch":
			c.Epoch, err = decodePosition(d)
		case "seq":
			c.Seq, err = decodePosition(d)
		case "last":
			c.Last, err = d.DecodeBool()
		case "events":
			var m int
			m, err = d.ArrayLen(MaxChunkEvents)
			for i := 0; err == nil && i < m; i++ {
				var ev Event
				if ev, err = decodeEvent(d); err == nil {
					c.Events = append(c.Events, ev.LifecycleEvent)
				}
			}
		default:
			err = d.Skip()
		}
		if err != nil {
			return c, fmt.Errorf("%s: %w", k, err)
		}
	}
	if !haveRouter {
		return c, errors.New("chunk without router_id")
	}
	return c, nil
}
