package loadgen_test

// An external test package: internal/config builds the bench's loadgen
// configuration, so a test of loadgen that starts a router through
// internal/service cannot live inside package loadgen.

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/loadgen"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/service"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// TestAgainstFleet runs a small shared-prefix workload through a real
// router in front of two mock workers on loopback.
func TestAgainstFleet(t *testing.T) {
	model, err := service.LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	fc := service.DefaultFleetConfig()
	fc.Workers = 2
	fc.Engine.BlockSize = 16
	fc.Engine.NumGPUBlocks = 4096
	fc.Engine.SpeedupRatio = 20
	fc.Tokenizer = model.Tokenizer
	fc.Logger = slog.New(slog.DiscardHandler)
	fleet, err := service.StartFleet(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Stop()
	cfg := config.Default()
	cfg.Port = 0
	cfg.BlockSize = 16
	cfg.DataDir = t.TempDir()
	cfg.Workers = fleet.Static()
	svc, err := service.New(cfg, service.Options{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service: %v", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	poll.Until(t, 10*time.Second, func() bool {
		resp, err := http.Get(url + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the router ready")
	wc := workload.DefaultSharedPrefixConfig()
	wc.NumGroups, wc.PromptsPerGroup, wc.SystemPromptLen, wc.QuestionLen, wc.OutputLen, wc.RequestRate = 4, 10, 512, 32, 8, 100
	src, err := workload.NewSharedPrefix(wc)
	if err != nil {
		t.Fatal(err)
	}
	lc := loadgen.DefaultConfig()
	lc.URL = url
	lc.Model = cfg.Model
	lc.Duration = 20 * time.Second
	lc.MaxConns = 8
	out, err := loadgen.Run(context.Background(), lc, src, "kvrouter", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Result
	t.Logf("%+v workers %v errors %v", r, out.Workers, out.Errors)
	if r.Requests != 40 || r.Failed != 0 || out.Cancelled != 0 {
		t.Fatalf("completed %d failed %d cancelled %d errors %v; want 40 completed", r.Requests, r.Failed, out.Cancelled, out.Errors)
	}
	if len(out.Workers) != 2 || !strings.HasPrefix(out.Workers[0], "mock-") {
		t.Fatalf("workers %v, want the two mocks", out.Workers)
	}
	// 4 groups × 10 prompts sharing 512-token system prompts: everything
	// after a group's first request can hit 512 of 544 tokens.
	if r.HitRatio < 0.5 || r.TTFTP50Ms <= 0 || r.E2EP50Ms < r.TTFTP50Ms || r.ThroughputTokS <= 0 {
		t.Fatalf("implausible result %+v", r)
	}
	if len(out.Load.Times) == 0 || len(out.Load.Load) != 2 {
		t.Fatalf("load series %d samples, %d workers", len(out.Load.Times), len(out.Load.Load))
	}
}
