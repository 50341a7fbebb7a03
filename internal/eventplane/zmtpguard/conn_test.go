package zmtpguard

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard/zmtptest"
)

// pipe returns a guarded conn reading what the returned writer end writes.
func pipe(t *testing.T, o Options) (*Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return NewConn(a, o), b
}

func TestConnPassesAnHonestStreamUnchanged(t *testing.T) {
	c, peer := pipe(t, Options{})
	s := honestStream()
	go func() { _, _ = peer.Write(s); peer.Close() }()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, s) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(s))
	}
}

func TestConnRefusesAndCloses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Options
		stream []byte
		want   error
	}{
		{"frame over the cap", Options{MaxFrameBytes: 1 << 20}, zmtptest.Bomb(1 << 30), ErrFrameTooLarge},
		{"connection over its cap", Options{MaxConnBytes: 100}, append(zmtptest.Greeting(), frame(0, make([]byte, 50))...), ErrTooMuchInput},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refused error
			tc.o.Refused = func(_ net.Addr, err error) { refused = err }
			c, peer := pipe(t, tc.o)
			go func() { _, _ = peer.Write(tc.stream) }()
			_, err := io.ReadAll(c)
			var ne net.Error
			if !errors.Is(err, tc.want) || !errors.As(err, &ne) || ne.Timeout() {
				t.Fatalf("read error %v, want a non-timeout net.Error wrapping %v", err, tc.want)
			}
			if !errors.Is(refused, tc.want) {
				t.Fatalf("Refused got %v", refused)
			}
			if _, err := peer.Write([]byte{0}); err == nil {
				t.Fatal("the connection is still open after the refusal")
			}
		})
	}
}
