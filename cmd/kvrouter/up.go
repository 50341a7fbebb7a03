package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/service"
)

const upSummary = "Start a local fleet in one process, mock workers, embedded NATS and the router, to try kvrouter without GPUs."

func init() {
	register("up", command{summary: upSummary, run: runUp})
}

var upUsage = helpText(upSummary, "kvrouter up [flags]",
	`Starts an embedded NATS server, --mock-workers mock vLLM workers on loopback ports (the embedded
Qwen3 tokenizer and chat template) that register in NATS and publish their KV events there, and
the router on 127.0.0.1:8000, which discovers them. --event-plane zmq runs them without NATS
(RouterEvents over ZMQ), --event-plane none with vLLM's own ZMQ streams. Ctrl-C stops everything.
Takes every 'kvrouter serve' option except the static worker list; see docs/config.md.`)

func runUp(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	u, _, code, ok := load[config.Up]("up", upUsage, args, config.DefaultUp, stdout, stderr)
	if !ok {
		return code
	}
	cfg := u.Router()
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvrouter up: "+format+"\n", a...)
		return 1
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.Level()}))
	model, err := service.LoadModel(cfg.TokenizerDir)
	if err != nil {
		return fail("%v", err)
	}
	fleet, svc, err := startUp(ctx, cfg, upFleetConfig(u, cfg, model, log), log)
	if err != nil {
		return fail("%v", err)
	}
	defer fleet.Stop()

	ln, err := net.Listen("tcp", cfg.Addr())
	if err != nil {
		svc.Close()
		return fail("%v (another kvrouter running? try --port)", err)
	}
	printUpBanner(stdout, u.FleetWorkers(), cfg, svc, "http://"+ln.Addr().String())
	if u.PrefillWorkers > 0 {
		fmt.Fprintf(stdout, "  disaggregated: mock-1..mock-%d prefill, the next %d decode (%s protocol); responses name both in X-Kvrouter-Prefill-Worker and X-Kvrouter-Worker\n\n",
			u.PrefillWorkers, u.DecodeWorkers, cfg.Frontend.PD.Protocol)
	}
	if err := svc.Run(ctx, ln); err != nil {
		return fail("%v", err)
	}
	return 0
}

// upFleetConfig is the mock fleet `up` starts: u's workers and engine,
// the router's model and event-plane names.
func upFleetConfig(u config.Up, cfg config.Config, model service.Model, log *slog.Logger) service.FleetConfig {
	fc := service.DefaultFleetConfig()
	fc.Workers = u.FleetWorkers()
	fc.PrefillWorkers, fc.DecodeWorkers, fc.PDProtocol = u.PrefillWorkers, u.DecodeWorkers, cfg.Frontend.PD.Protocol
	fc.Model = cfg.Model
	names, sizes := u.FleetModels()
	for i, n := range names {
		fc.Models = append(fc.Models, service.FleetModel{Name: n, BlockSize: sizes[i]})
	}
	fc.Engine = u.FleetEngine()
	fc.PerWorker = u.Fleet
	fc.Tokenizer = model.Tokenizer
	fc.ChatTemplate = model.Template
	fc.Logger = log.With("component", "mocker")
	fc.Namespace, fc.Component, fc.Registry = cfg.EventPlane.Namespace, cfg.EventPlane.Component, cfg.EventPlane.Registry
	return fc
}

// startUp builds the router and starts the mock fleet, in the order the
// event plane needs; on an error nothing is left running.
func startUp(ctx context.Context, cfg config.Config, fc service.FleetConfig, log *slog.Logger) (*service.Fleet, *service.Service, error) {
	opts := service.Options{Logger: log.With("component", "router")}
	if cfg.EventPlane.Kind == config.PlaneNATS {
		// The router first: its embedded NATS is where the mock workers
		// register and publish; the router discovers them in the registry.
		svc, err := service.New(cfg, opts)
		if err != nil {
			return nil, nil, err
		}
		// An external --nats-url is waited for (retried until it answers
		// or Ctrl-C), as serve would.
		if err := svc.ConnectNATS(ctx); err != nil {
			svc.Close()
			return nil, nil, err
		}
		fc.Plane, fc.Bus, fc.Metrics = config.PlaneNATS, svc.Bus(), svc.Registry()
		fleet, err := service.StartFleet(fc)
		if err != nil {
			svc.Close()
			return nil, nil, fmt.Errorf("starting mock workers: %w", err)
		}
		return fleet, svc, nil
	}
	// zmq: RouterEvents over ZMQ; none: the engines' own vLLM ZMQ
	// streams. Either way the router reads the static list.
	fc.Plane = service.FleetEngineZMQ
	if cfg.EventPlane.Kind == config.PlaneZMQ {
		fc.Plane = config.PlaneZMQ
	}
	fleet, err := service.StartFleet(fc)
	if err != nil {
		return nil, nil, fmt.Errorf("starting mock workers: %w", err)
	}
	cfg.Workers = fleet.Static()
	svc, err := service.New(cfg, opts)
	if err != nil {
		fleet.Stop()
		return nil, nil, err
	}
	return fleet, svc, nil
}

// printUpBanner tells the user where the router listens and how to try it.
func printUpBanner(stdout io.Writer, workers int, cfg config.Config, svc *service.Service, url string) {
	fmt.Fprintf(stdout, `
kvrouter is up: %d mock workers behind the router at %s (%s)
  events       %s

  status page  %s/
  workers      %s/v1/workers
  metrics      %s/metrics

  try:
    curl %s/v1/chat/completions -H 'Content-Type: application/json' \
      -d '{"model":"%s","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'

Ctrl-C stops everything.

`, workers, url, modelsLine(cfg), eventsLine(cfg, svc), url, url, url, url, cfg.Model)
}

// modelsLine names the served models for the banner.
func modelsLine(cfg config.Config) string {
	if len(cfg.Models) == 0 {
		return "model " + cfg.Model
	}
	names := []string{cfg.Model}
	for _, m := range cfg.Models {
		names = append(names, m.Name)
	}
	return "models " + strings.Join(names, ", ")
}

// eventsLine describes the event plane for the banner.
func eventsLine(cfg config.Config, svc *service.Service) string {
	switch {
	case svc.Bus() != nil:
		auth := ""
		if f := svc.Bus().TokenFile(); f != "" {
			auth = "; other processes connect with --nats-token-file " + f
		}
		return fmt.Sprintf("NATS %s (namespace %s, component %s; workers register in %s%s)",
			svc.Bus().ClientURL(), cfg.EventPlane.Namespace, cfg.EventPlane.Component, cfg.EventPlane.Registry.Bucket, auth)
	case cfg.EventPlane.Kind == config.PlaneZMQ:
		return "RouterEvents over ZMQ (no NATS)"
	default:
		return "the engines' own vLLM ZMQ streams (no NATS)"
	}
}
