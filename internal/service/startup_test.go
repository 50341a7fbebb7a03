package service

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// freePort returns a loopback port nothing listens on (yet).
func freePort(t *testing.T) int {
	t.Helper()
	ln := listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// externalNATSConfig is a router on a free port whose event plane is an
// external NATS server at port, with fast retries.
func externalNATSConfig(t *testing.T, port int) config.Config {
	cfg := config.Default()
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.EventPlane.NATS.URL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	cfg.EventPlane.NATS.ReconnectWait = 50 * time.Millisecond
	cfg.EventPlane.NATS.StartTimeout = 500 * time.Millisecond
	cfg.EventPlane.NATS.ConnectTimeout = 500 * time.Millisecond
	cfg.Frontend.ShutdownTimeout = 2 * time.Second
	return cfg
}

// running is a Service being run on a loopback listener.
type running struct {
	svc    *Service
	reg    *prometheus.Registry
	url    string
	logs   *logtest.Buffer
	cancel context.CancelFunc
	done   chan error
}

func runService(t *testing.T, cfg config.Config) *running {
	t.Helper()
	logs := &logtest.Buffer{}
	r := &running{reg: prometheus.NewRegistry(), logs: logs, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	svc, err := New(cfg, Options{Logger: log, Registry: r.reg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln := listen(t)
	r.svc, r.url = svc, "http://"+ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- svc.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30 s of cancel")
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	return r
}

func (r *running) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(r.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// retries is how many NATS startup retries of step r counted.
func (r *running) retries(t *testing.T, step string) float64 {
	t.Helper()
	return metricstest.Sum(t, r.reg, "kvrouter_nats_startup_retries_total", "step", step)
}

// TestStartupWaitsForNATS: a router whose external NATS server is down at
// start serves at once (/health 200, /ready 503 saying it waits for NATS),
// retries the connection (counted), and once the server comes up on that
// port becomes ready without a restart; Run did not return meanwhile.
func TestStartupWaitsForNATS(t *testing.T) {
	port := freePort(t)
	r := runService(t, externalNATSConfig(t, port))
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		return r.retries(t, "connect") >= 2, fmt.Sprint(r.retries(t, "connect"))
	}, "a counted connection retry")
	if code, body := r.get(t, "/health"); code != http.StatusOK {
		t.Fatalf("/health %d while NATS is down: %s", code, body)
	}
	code, body := r.get(t, "/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "connecting to NATS at nats://127.0.0.1:") {
		t.Fatalf("/ready %d %q; want 503 naming the NATS start-up", code, body)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned while NATS was down: %v", err)
	default:
	}

	natstest.StartServer(t, port, true)
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		code, body := r.get(t, "/ready")
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	}, "ready once NATS is up")
	if !strings.Contains(r.logs.String(), "NATS start-up step succeeded after retries") {
		t.Error("the recovery was not logged")
	}
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r.done <- nil // for the cleanup
}

// TestStartupNATSAuthRefusedIsFatal: credentials the server refuses are a
// misconfiguration, not an outage: Run returns an ErrStartup error saying
// so instead of retrying forever.
func TestStartupNATSAuthRefusedIsFatal(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Authorization: "right"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	cfg := externalNATSConfig(t, srv.Addr().(*net.TCPAddr).Port)
	cfg.EventPlane.NATS.Token = "wrong"
	r := runService(t, cfg)
	select {
	case err := <-r.done:
		if !errors.Is(err, ErrStartup) || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Fatalf("Run returned %v; want an ErrStartup naming the authorization failure", err)
		}
		r.done <- err // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("Run still retrying 20 s after the server refused the credentials")
	}
}

// TestStartupCancelWhileNATSDown: a router stopped while it still waits
// for NATS returns from Run promptly and cleanly (the retry wait ends
// with the context; goleak checks nothing is left behind).
func TestStartupCancelWhileNATSDown(t *testing.T) {
	r := runService(t, externalNATSConfig(t, freePort(t)))
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		return r.retries(t, "connect") >= 1, "none yet"
	}, "a connection retry")
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Run still waiting for NATS 5 s after cancel")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Run took %v to return after cancel", took)
	}
}

// TestFatalNATS: which start-up errors end Run (a misconfiguration) and
// which are retried (the server away).
func TestFatalNATS(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	for _, tc := range []struct {
		err   error
		fatal bool
	}{
		{fmt.Errorf("connecting: %w", nats.ErrAuthorization), true},
		{nats.ErrAuthExpired, true},
		{nats.ErrSecureConnRequired, true},
		{fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), true},
		{&fs.PathError{Op: "open", Path: "/etc/nats.creds", Err: fs.ErrNotExist}, true},
		{errors.New("nats: Authorization Violation"), true},
		{refused, false},
		{nats.ErrNoServers, false},
		{nats.ErrTimeout, false},
		{context.DeadlineExceeded, false},
		{errors.New("connection reconnecting"), false},
		{errors.New("nats: no responders available for request"), false},
	} {
		if got := fatalNATS(tc.err); got != tc.fatal {
			t.Errorf("fatalNATS(%v) = %v, want %v", tc.err, got, tc.fatal)
		}
	}
}
