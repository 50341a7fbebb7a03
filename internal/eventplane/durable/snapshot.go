package durable

import (
	"bytes"
	"errors"
	"fmt"
	"math"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/mpack"
	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed wraps every snapshot decoding error.
var ErrMalformed = errors.New("malformed index snapshot")

// Snapshot is a router's index at one point of the stream.
type Snapshot struct {
	// StreamSeq is the last stream sequence the snapshot includes.
	StreamSeq uint64
	// Last is each worker rank's last applied event id (ranks that
	// applied none are absent: ids count from 0).
	Last map[kvevent.WorkerRank]uint64
	// Publishers is the publisher id each rank's events came from (absent:
	// unknown); a restored router that gets a recovery answer from another
	// publisher knows the worker restarted meanwhile.
	Publishers map[kvevent.WorkerRank]uint64
	// Events rebuild the index (an index dump).
	Events []kvevent.Event
}

// Encode returns s as msgpack: {version: 1, stream_seq,
// last_ids: [[worker_id, dp_rank, event_id]...],
// publishers: [[worker_id, dp_rank, publisher_id]...], events: [bin RouterEvent]}.
func (s Snapshot) Encode() ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	_ = e.EncodeMapLen(5)
	_ = e.EncodeString("version")
	_ = e.EncodeUint(1)
	_ = e.EncodeString("stream_seq")
	_ = e.EncodeUint(s.StreamSeq)
	_ = e.EncodeString("last_ids")
	_ = e.EncodeArrayLen(len(s.Last))
	for w, id := range s.Last {
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeUint(uint64(w.ID))
		_ = e.EncodeUint(uint64(w.Rank))
		_ = e.EncodeUint(id)
	}
	_ = e.EncodeString("publishers")
	_ = e.EncodeArrayLen(len(s.Publishers))
	for w, id := range s.Publishers {
		_ = e.EncodeArrayLen(3)
		_ = e.EncodeUint(uint64(w.ID))
		_ = e.EncodeUint(uint64(w.Rank))
		_ = e.EncodeUint(id)
	}
	_ = e.EncodeString("events")
	_ = e.EncodeArrayLen(len(s.Events))
	var tmp []byte
	for _, ev := range s.Events {
		var err error
		if tmp, err = dynamo.AppendEvent(tmp[:0], ev); err != nil {
			return nil, fmt.Errorf("encoding snapshot: %w", err)
		}
		_ = e.EncodeBytes(tmp)
	}
	return buf.Bytes(), nil
}

// DecodeSnapshot decodes a snapshot; unknown fields are skipped.
func DecodeSnapshot(b []byte) (Snapshot, error) {
	s := Snapshot{Last: map[kvevent.WorkerRank]uint64{}, Publishers: map[kvevent.WorkerRank]uint64{}}
	d := mpack.NewDecoder(b)
	bad := func(what string, err error) (Snapshot, error) {
		return s, fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
	}
	n, err := d.DecodeMapLen()
	if err != nil || n < 0 {
		return bad("top level", err)
	}
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return bad("key", err)
		}
		switch k {
		case "version":
			v, err := d.DecodeUint64()
			if err != nil || v != 1 {
				return bad("version", fmt.Errorf("%d %v", v, err))
			}
		case "stream_seq":
			if s.StreamSeq, err = d.DecodeUint64(); err != nil {
				return bad(k, err)
			}
		case "last_ids", "publishers":
			into := s.Last
			if k == "publishers" {
				into = s.Publishers
			}
			if err := decodeRankIDs(d, into); err != nil {
				return bad(k, err)
			}
		case "events":
			if s.Events, err = dynamo.DecodeEventArray(d); err != nil {
				return bad(k, err)
			}
		default:
			if err := d.Skip(); err != nil {
				return bad(k, err)
			}
		}
	}
	return s, nil
}

// decodeRankIDs decodes [[worker_id, dp_rank, id]...] into m.
func decodeRankIDs(d *mpack.Decoder, m map[kvevent.WorkerRank]uint64) error {
	n, err := d.ArrayLen(math.MaxInt)
	if err != nil {
		return err
	}
	for range n {
		l, err := d.DecodeArrayLen()
		if err != nil || l != 3 {
			return fmt.Errorf("entry of %d: %v", l, err)
		}
		id, err1 := d.DecodeUint64()
		rank, err2 := d.DecodeUint32()
		v, err3 := d.DecodeUint64()
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		m[kvevent.WorkerRank{ID: kvevent.WorkerID(id), Rank: kvevent.DPRank(rank)}] = v
	}
	return nil
}
