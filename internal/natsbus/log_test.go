package natsbus

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/logtest"
)

// TestEmbeddedBannerAtDebug checks that, at info level, starting the
// embedded server logs one line naming its address and not the server's
// multi-line banner, which stays available at debug level; and that a
// clean start and shutdown warns about nothing.
func TestEmbeddedBannerAtDebug(t *testing.T) {
	for _, lvl := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf logtest.Buffer
		b, err := Start(testConfig(t), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: lvl})))
		if err != nil {
			t.Fatal(err)
		}
		url := b.ClientURL()
		b.Shutdown()
		b.WaitForShutdown()
		out := buf.String()
		if n := strings.Count(out, "embedded NATS listening on "+url); n != 1 {
			t.Errorf("level %v: %d lines announce %s, want 1:\n%s", lvl, n, url, out)
		}
		if strings.Contains(out, "level=WARN") {
			t.Errorf("level %v: a clean start and shutdown logged a warning:\n%s", lvl, out)
		}
		banner := strings.Contains(out, "Starting nats-server")
		if banner != (lvl == slog.LevelDebug) {
			t.Errorf("level %v: server banner logged %v:\n%s", lvl, banner, out)
		}
	}
}
