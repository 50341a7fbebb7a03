package vllmzmq

import (
	"context"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
	"pgregory.net/rapid"
)

// fakeEngine is a publisher without sockets: a sequence counter, an
// incarnation number (bumped by a restart) and a replay ring.
type fakeEngine struct {
	inc, seq uint64
	cap      int
	ring     []buffered
}

// payload stores one block whose engine hash names (incarnation, seq).
func (e *fakeEngine) payload(seq uint64) []byte {
	p, err := vllm.Encode(vllm.RawBatch{Events: []vllm.RawEvent{vllm.BlockStored{
		BlockHashes: []vllm.Hash{vllm.UintHash(e.inc<<32 | seq)}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4}}},
		vllm.Format{})
	if err != nil {
		panic(err)
	}
	return p
}

func (e *fakeEngine) next(keep bool) (uint64, []byte) {
	seq := e.seq
	e.seq++
	p := e.payload(seq)
	if keep {
		e.ring = append(e.ring, buffered{seq: seq, payload: p})
		if len(e.ring) > e.cap {
			e.ring = e.ring[1:]
		}
	}
	return seq, p
}

func (e *fakeEngine) Replay(_ context.Context, from uint64, fn func(uint64, []byte) bool) error {
	for _, b := range e.ring {
		if b.seq >= from && !fn(b.seq, b.payload) {
			break
		}
	}
	return nil
}

func live(seq uint64, payload []byte) zmq4.Msg {
	return zmq4.NewMsgFrom([]byte(testTopic), seqFrame(seq), payload)
}

// TestStreamProperties drives the subscriber's stream logic with random
// publisher faults (lost live messages, lost batches, duplicates, restarts,
// dropped connections, small replay buffers) and checks what the index
// would see:
//   - between two clears, the stored blocks come from one engine
//     incarnation with consecutive sequence numbers (nothing skipped,
//     nothing stale);
//   - without lost batches (beyond what replay still holds), restarts or
//     dropped connections nothing is ever cleared;
//   - after two clean batches the stream ends EXACT with the last batch
//     applied.
func TestStreamProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		eng := &fakeEngine{inc: 1, cap: rapid.IntRange(1, 8).Draw(t, "buffer")}
		rec := &recorder{}
		cfg := DefaultSubscriberConfig()
		cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize, cfg.Logger = worker, "tcp://fake:1", testTopic, 4, quiet
		s, err := NewSubscriber(cfg, rec)
		if err != nil {
			t.Fatal(err)
		}
		if rapid.Bool().Draw(t, "replay") {
			s.rp = eng
		}
		ctx := context.Background()
		s.initialSync(ctx)
		// faulty: something happened that may force a clear. Batches lost
		// on the wire only count when replay can no longer serve them at
		// the next live message.
		faulty := false
		var dropped []uint64
		deliver := func(seq uint64, p []byte) {
			for _, d := range dropped {
				held := false
				for _, b := range eng.ring {
					held = held || b.seq == d
				}
				faulty = faulty || s.rp == nil || !held
			}
			dropped = dropped[:0]
			s.live(ctx, live(seq, p))
		}
		for range rapid.IntRange(0, 40).Draw(t, "steps") {
			switch rapid.IntRange(0, 6).Draw(t, "action") {
			case 0, 1: // normal
				deliver(eng.next(true))
			case 2: // lost on the wire, replayable
				seq, _ := eng.next(true)
				dropped = append(dropped, seq)
			case 3: // lost for good
				eng.next(false)
				faulty = true
			case 4: // duplicated
				seq, p := eng.next(true)
				deliver(seq, p)
				s.live(ctx, live(seq, p))
			case 5: // engine restart: a new process, so the connection drops
				eng.inc++
				eng.seq, eng.ring = 0, nil
				s.live(ctx, zmq4.Msg{})
				faulty = true
			case 6: // connection dropped and re-established
				s.live(ctx, zmq4.Msg{})
				faulty = true
			}
		}
		for range 2 {
			deliver(eng.next(true))
		}

		_, events, states := rec.snapshot()
		clears := 0
		var prev *kvevent.Event
		for i := range events {
			e := &events[i]
			switch e.Kind {
			case kvevent.Cleared:
				clears++
				prev = nil
			case kvevent.Stored:
				if prev != nil {
					a, b := prev.Blocks[0].EngineHash, e.Blocks[0].EngineHash
					if a>>32 != b>>32 || b&0xffffffff != a&0xffffffff+1 {
						t.Fatalf("event %d: block %#x follows %#x without a clear", i, b, a)
					}
				}
				prev = e
			}
		}
		if !faulty && clears != 0 {
			t.Fatalf("%d clears without a fault", clears)
		}
		if last := events[len(events)-1]; last.Blocks[0].EngineHash != eng.inc<<32|(eng.seq-1) {
			t.Fatalf("last applied block %#x, want %#x", last.Blocks[0].EngineHash, eng.inc<<32|(eng.seq-1))
		}
		if st := states[len(states)-1]; st.State != StateExact {
			t.Fatalf("final state %+v", st)
		}
	})
}
