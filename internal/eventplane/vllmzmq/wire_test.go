package vllmzmq

import (
	"bytes"
	"testing"
)

func TestSplitReplyBothFormats(t *testing.T) {
	for _, rf := range []ReplayFormat{ReplayTopic, ReplayLegacy} {
		p := &Publisher{cfg: PublisherConfig{Topic: "kv", ReplayFormat: rf}}
		m := p.reply([]byte("id"), seqFrame(812), []byte{0x93}, false)
		seq, payload, end, ok := splitReply(m.Frames[1:]) // the ROUTER strips the identity
		if !ok || end || seq != 812 || !bytes.Equal(payload, []byte{0x93}) {
			t.Errorf("%v: batch reply read as %d %x end=%v ok=%v", rf, seq, payload, end, ok)
		}
		m = p.reply([]byte("id"), endSeq, []byte{}, true)
		if _, _, end, ok := splitReply(m.Frames[1:]); !ok || !end {
			t.Errorf("%v: END not recognised: %q", rf, m.Frames)
		}
		if want := map[ReplayFormat]int{ReplayTopic: 4, ReplayLegacy: 3}[rf]; len(m.Frames)-1 != want {
			t.Errorf("%v: END has %d frames, want %d", rf, len(m.Frames)-1, want)
		}
	}
	if _, _, _, ok := splitReply([][]byte{{}, {1}}); ok {
		t.Error("two frames accepted")
	}
	if _, _, _, ok := splitLive([][]byte{{}, make([]byte, 9), {}}); ok {
		t.Error("9-byte sequence accepted")
	}
}

// FuzzSplitFrames checks frame parsing never panics and that a sequence
// read back re-encodes to the same 8-byte frame.
func FuzzSplitFrames(f *testing.F) {
	f.Add([]byte{}, []byte("kv"), seqFrame(3), []byte{0x90}, uint8(4))
	f.Add([]byte{}, seqFrame(7), []byte{0x90}, []byte{}, uint8(3))
	f.Fuzz(func(t *testing.T, a, b, c, d []byte, n uint8) {
		frames := [][]byte{a, b, c, d, a}[:n%6]
		if seq, _, end, ok := splitReply(frames); ok && !end {
			var seqB []byte
			if len(frames) == 3 {
				seqB = frames[1]
			} else {
				seqB = frames[2]
			}
			if len(seqB) == 8 && !bytes.Equal(seqFrame(seq), seqB) {
				t.Fatalf("sequence %d does not round-trip %x", seq, seqB)
			}
		}
		if _, seq, _, ok := splitLive(frames); ok && len(frames[1]) == 8 && !bytes.Equal(seqFrame(seq), frames[1]) {
			t.Fatalf("live sequence %d does not round-trip %x", seq, frames[1])
		}
	})
}
