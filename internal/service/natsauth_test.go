package service

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
)

// TestEmbeddedNATSRequiresTokenByDefault is issue 21 A7: with the default
// configuration (embedded NATS, no credential set) any local process could
// register a worker and be sent prompts. Now the embedded server requires
// a random token kept in <data-dir>/nats-token: a client without it is
// refused, one given the file gets in, and the router's own mock fleet
// (registering and publishing over the router's connection) still works.
func TestEmbeddedNATSRequiresTokenByDefault(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS})
	r.waitExact()
	for _, p := range prompts(4, 7) {
		if w := r.complete(p, 2); w == "" {
			t.Fatal("completion without a worker header")
		}
	}
	url := r.svc.Bus().ClientURL()
	nc, err := nats.Connect(url, nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("an unauthenticated client connected to the embedded NATS server")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("refused for another reason: %v", err)
	}
	file := filepath.Join(r.svc.cfg.DataDir, "nats-token")
	if r.svc.Bus().TokenFile() != file {
		t.Fatalf("token file %q, want %q", r.svc.Bus().TokenFile(), file)
	}
	tok, err := natsbus.ReadTokenFile(file)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Connect(t, url, nats.Token(tok))
	if strings.Contains(r.logs.String(), tok) {
		t.Fatal("the token was logged")
	}
	if !strings.Contains(r.logs.String(), "--nats-token-file "+file) {
		t.Fatal("the log does not say where other processes find the token")
	}
}

// TestNATSWithoutAuthWarns: HTTP keys with an external NATS and no NATS
// credential is warned about at start (the keys guard nothing NATS lets
// through); with a credential there is no warning.
func TestNATSWithoutAuthWarns(t *testing.T) {
	srv := natstest.StartServer(t, -1, true)
	for _, withAuth := range []bool{false, true} {
		cfg := externalNATSConfig(t, 0)
		cfg.EventPlane.NATS.URL = srv.ClientURL()
		cfg.Frontend.APIKeys = []string{"k"}
		if withAuth {
			cfg.EventPlane.NATS.User, cfg.EventPlane.NATS.Password = "u", "p"
		}
		logs := &logtest.Buffer{}
		svc, err := New(cfg, Options{Logger: slogTo(logs)})
		if err != nil {
			t.Fatal(err)
		}
		svc.Close()
		warned := strings.Contains(logs.String(), "SECURITY: HTTP keys are set but NATS has no credential")
		if warned == withAuth {
			t.Errorf("with auth %v: warned %v; logs:\n%s", withAuth, warned, logs)
		}
	}
}

func slogTo(l *logtest.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
