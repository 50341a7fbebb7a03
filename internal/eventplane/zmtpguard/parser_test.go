package zmtpguard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
)

// frame encodes one ZMTP 3 frame as the spec lays it out, short or long as
// its size needs.
func frame(flags byte, body []byte) []byte {
	if len(body) <= 255 {
		return append([]byte{flags, byte(len(body))}, body...)
	}
	h := make([]byte, 9)
	h[0] = flags | flagLong
	binary.BigEndian.PutUint64(h[1:], uint64(len(body)))
	return append(h, body...)
}

// reference parses a whole stream at once: the number of frames accepted
// and whether a header passes max. It is the specification the
// incremental parser is checked against.
func reference(stream []byte, max uint64) (frames uint64, tooLarge bool) {
	if len(stream) < GreetingLen {
		return 0, false
	}
	b := stream[GreetingLen:]
	var msg uint64 // the current message's frames so far
	for len(b) > 0 {
		var size uint64
		flags := b[0]
		switch {
		case b[0]&flagLong == 0 && len(b) >= 2:
			size, b = uint64(b[1]), b[2:]
		case b[0]&flagLong != 0 && len(b) >= 9:
			size, b = binary.BigEndian.Uint64(b[1:9]), b[9:]
		default:
			return frames, false
		}
		if size > max || msg+size > max || msg+size < msg {
			return frames, true
		}
		msg += size
		if flags&flagMore == 0 || flags&flagCommand != 0 {
			msg = 0
		}
		frames++
		if uint64(len(b)) <= size {
			return frames, false
		}
		b = b[size:]
	}
	return frames, false
}

func honestStream() []byte {
	s := zmtptest.Greeting()
	s = append(s, frame(flagCommand, []byte("\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB"))...)
	s = append(s, frame(flagMore, []byte("kv-events"))...)
	s = append(s, frame(flagMore, []byte{0, 0, 0, 0, 0, 0, 0, 7})...)
	// A body that holds what looks like a bomb header must not trip it.
	s = append(s, frame(0, bytes.Repeat(zmtptest.LongHeader(flagCommand, 1<<40), 40))...)
	s = append(s, frame(0, nil)...)
	s = append(s, zmtptest.LongHeader(flagCommand, 16)...) // long-coded short frame
	s = append(s, "sixteen bytes..."...)
	return s
}

func TestParserHonestStreamEveryChunking(t *testing.T) {
	s := honestStream()
	want, _ := reference(s, DefaultMaxFrameBytes)
	if want != 6 {
		t.Fatalf("reference counts %d frames, want 6", want)
	}
	for cut := range len(s) + 1 {
		p := NewParser(DefaultMaxFrameBytes)
		if err := p.Feed(s[:cut]); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if err := p.Feed(s[cut:]); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if p.Frames() != want {
			t.Fatalf("cut %d: %d frames, want %d", cut, p.Frames(), want)
		}
	}
	p := NewParser(DefaultMaxFrameBytes)
	for i := range s {
		if err := p.Feed(s[i : i+1]); err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
	}
	if p.Frames() != want {
		t.Fatalf("byte by byte: %d frames, want %d", p.Frames(), want)
	}
}

func TestParserRefusesTheBomb(t *testing.T) {
	// The probe of issue 21: 06 00 00 01 00 00 00 00 00 after the greeting.
	bomb := append(zmtptest.Greeting(), 0x06, 0, 0, 1, 0, 0, 0, 0, 0)
	if !bytes.Equal(bomb, zmtptest.Bomb(1<<40)) {
		t.Fatal("zmtptest.Bomb(1 TiB) is not the probe's bytes")
	}
	for cut := range len(bomb) {
		p := NewParser(DefaultMaxFrameBytes)
		err := p.Feed(bomb[:cut])
		if err != nil {
			t.Fatalf("cut %d: refused before the header was complete: %v", cut, err)
		}
		if err = p.Feed(bomb[cut:]); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("cut %d: got %v, want ErrFrameTooLarge", cut, err)
		}
		if err := p.Feed([]byte{0}); !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("cut %d: after refusal got %v", cut, err)
		}
	}
}

func TestParserCapIsInclusive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		max    uint64
		header []byte
		refuse bool
	}{
		{"short at cap", 10, []byte{0, 10}, false},
		{"short over cap", 10, []byte{0, 11}, true},
		{"long at cap", 1000, zmtptest.LongHeader(0, 1000), false},
		{"long over cap", 1000, zmtptest.LongHeader(0, 1001), true},
		{"long max uint64", DefaultMaxFrameBytes, zmtptest.LongHeader(flagMore, ^uint64(0)), true},
		{"command over cap", 1000, zmtptest.LongHeader(flagCommand, 1<<20), true},
		{"message at cap", 10, []byte{flagMore, 4, 1, 2, 3, 4, flagMore, 0, 0, 6}, false},
		{"message over cap", 10, []byte{flagMore, 4, 1, 2, 3, 4, flagMore, 0, 0, 7}, true},
		{"next message starts at 0", 10, []byte{flagMore, 4, 1, 2, 3, 4, 0, 6, 1, 2, 3, 4, 5, 6, 0, 10}, false},
		{"command does not add up", 10, []byte{flagCommand | flagMore, 4, 1, 2, 3, 4, 0, 10}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewParser(tc.max)
			err := p.Feed(append(zmtptest.Greeting(), tc.header...))
			if got := errors.Is(err, ErrFrameTooLarge); got != tc.refuse {
				t.Fatalf("refused=%v (%v), want %v", got, err, tc.refuse)
			}
		})
	}
}

func TestParserFollowsFramesAfterAGreetingInPieces(t *testing.T) {
	// Greeting sent as libzmq does: signature, then major, then the rest.
	g := zmtptest.Greeting()
	p := NewParser(100)
	for _, piece := range [][]byte{g[:10], g[10:11], g[11:], {0, 5}, []byte("hello"), {0, 101}} {
		if err := p.Feed(piece); err != nil {
			if p.Frames() != 1 || !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("frames %d, err %v", p.Frames(), err)
			}
			return
		}
	}
	t.Fatal("the 101-byte frame was not refused")
}

func FuzzParser(f *testing.F) {
	f.Add(honestStream(), uint64(DefaultMaxFrameBytes), uint16(7))
	f.Add(zmtptest.Bomb(1<<40), uint64(DefaultMaxFrameBytes), uint16(65))
	f.Add(zmtptest.Bomb(100), uint64(99), uint16(0))
	f.Add(append(zmtptest.Greeting(), 0, 3, 'a', 'b', 'c', 0x02, 0, 0, 0, 0, 0, 0, 0, 4), uint64(3), uint16(66))
	f.Fuzz(func(t *testing.T, stream []byte, max uint64, cut uint16) {
		wantFrames, wantRefused := reference(stream, max)
		p := NewParser(max)
		c := min(int(cut), len(stream))
		err := p.Feed(stream[:c])
		if err == nil {
			err = p.Feed(stream[c:])
		}
		if got := errors.Is(err, ErrFrameTooLarge); got != wantRefused || (err != nil && !got) {
			t.Fatalf("refused=%v err=%v, reference refused=%v", got, err, wantRefused)
		}
		if p.Frames() != wantFrames {
			t.Fatalf("%d frames, reference %d", p.Frames(), wantFrames)
		}
	})
}

// Handshaken turns true with the last byte of the first command frame
// after the greeting, and not before, whatever the pieces.
func TestParserHandshakenAtTheEndOfTheFirstCommand(t *testing.T) {
	hs := append(zmtptest.Greeting(), zmtptest.Ready("SUB")...)
	for piece := 1; piece <= len(hs); piece++ {
		p := NewParser(DefaultMaxFrameBytes)
		for i := 0; i < len(hs); i += piece {
			end := min(i+piece, len(hs))
			if err := p.Feed(hs[i:end]); err != nil {
				t.Fatal(err)
			}
			if got, want := p.Handshaken(), end == len(hs); got != want {
				t.Fatalf("pieces of %d: Handshaken %v after %d of %d bytes", piece, got, end, len(hs))
			}
		}
	}
	// A message frame before any command is no handshake.
	p := NewParser(DefaultMaxFrameBytes)
	if err := p.Feed(append(zmtptest.Greeting(), frame(0, []byte("x"))...)); err != nil || p.Handshaken() {
		t.Fatalf("after a message frame: Handshaken %v, err %v", p.Handshaken(), err)
	}
}
