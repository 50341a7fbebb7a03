package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/service"
)

// TestStartupSurvivesNATSRestart: routers (internal/service) are started
// while their external NATS server is down; it comes back a random few
// hundred milliseconds later and restarts once more during their start-up
// (connecting, subscribing, opening and watching the worker registry).
// None exits on its own: each becomes ready, discovers the registered mock
// workers and serves requests; Run returns nil on shutdown.
func TestStartupSurvivesNATSRestart(t *testing.T) {
	seed := seeds(1)[0] // fixed in the gate; -chaos.fresh or -chaos.seed=N otherwise
	t.Logf("seed %d (replay: -chaos.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 10))
	logs := &logBuf{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	defer func() {
		if t.Failed() {
			t.Logf("logs (tail):\n%s", logs.tail(200))
		}
	}()
	ns := natstest.StartRestartable(t)
	url := ns.URL()

	bc := natsbus.DefaultConfig()
	bc.URL, bc.ReconnectWait = url, 50*time.Millisecond
	bus, err := natsbus.Start(bc, log.With("side", "workers"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { bus.Shutdown(); bus.WaitForShutdown() }()
	model, err := sharedModel()
	if err != nil {
		t.Fatal(err)
	}
	fc := service.DefaultFleetConfig()
	fc.Workers = 2
	fc.Model = modelName
	fc.Engine.BlockSize = blockSize
	fc.Engine.SpeedupRatio = 1000
	fc.Tokenizer = model.Tokenizer
	fc.Logger = log.With("side", "mock")
	fc.Plane, fc.Bus = config.PlaneNATS, bus
	mock, err := service.StartFleet(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Stop()

	for round := range 2 {
		cfg := config.Default()
		cfg.Port = 0
		cfg.DataDir = t.TempDir()
		cfg.BlockSize = blockSize
		cfg.EventPlane.NATS.URL = url
		cfg.EventPlane.NATS.ReconnectWait = 50 * time.Millisecond
		cfg.EventPlane.NATS.StartTimeout = 2 * time.Second
		cfg.Events.ReadyTimeout = 5 * time.Second
		cfg.Events.HealthInterval = 0
		cfg.Frontend.ShutdownTimeout = 2 * time.Second
		// The fault: NATS is down when the router starts, comes back,
		// and restarts once more a moment later, during the router's
		// start-up steps (connect, subscribe, registry open and watch).
		ns.Stop()
		svc, err := service.New(cfg, service.Options{Logger: log.With("router", round), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatalf("round %d: New: %v", round, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			svc.Close()
			t.Fatal(err)
		}
		base := "http://" + ln.Addr().String()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx, ln) }()
		stopRouter := func() error {
			cancel()
			select {
			case err := <-done:
				return err
			case <-time.After(30 * time.Second):
				return fmt.Errorf("Run did not return within 30 s")
			}
		}

		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		ns.Start(true)
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		ns.Stop()
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
		ns.Start(true)

		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		deadline := time.Now().Add(30 * time.Second)
		var last string
		for {
			select {
			case err := <-done:
				t.Fatalf("round %d: router exited on its own during a NATS restart: %v", round, err)
			default:
			}
			if resp, err := c.Get(base + "/ready"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				last = fmt.Sprintf("%d %s", resp.StatusCode, b)
				if resp.StatusCode == http.StatusOK && len(svc.Workers()) == fc.Workers {
					break
				}
			}
			if time.Now().After(deadline) {
				_ = stopRouter()
				t.Fatalf("round %d: not ready with %d workers after 30 s; /ready: %s; workers %d", round, fc.Workers, last, len(svc.Workers()))
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range 4 {
			body := fmt.Sprintf(`{"model":%q,"prompt":"round %d request %d after a NATS restart","max_tokens":8}`, modelName, round, i)
			resp, err := c.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				_ = stopRouter()
				t.Fatalf("round %d request %d: %v", round, i, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"choices"`) {
				_ = stopRouter()
				t.Fatalf("round %d request %d: %d %s", round, i, resp.StatusCode, b)
			}
		}
		if err := stopRouter(); err != nil {
			t.Fatalf("round %d: Run: %v", round, err)
		}
	}
}
