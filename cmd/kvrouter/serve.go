package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/service"
)

const serveSummary = "Run the router: send each OpenAI request to the worker whose KV cache holds the longest prefix of its prompt."

func init() {
	register("serve", command{summary: serveSummary, run: runServe})
}

var serveUsage = helpText(serveSummary, "kvrouter serve [flags]",
	`Routes to the workers that register in the NATS registry (kvrouter agent, the mocker with
--event-plane nats) and those listed with --worker (or the config file's workers:), following each
worker's KV events: RouterEvents on the event plane (NATS by default, embedded unless --nats-url)
or an engine's own vLLM/SGLang ZMQ stream. See docs/config.md for every option.`)

func runServe(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	cfg, _, code, ok := load[config.Config]("serve", serveUsage, args, config.Default, stdout, stderr)
	if !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.Level()}))
	if len(cfg.Workers) == 0 && cfg.EventPlane.Kind != config.PlaneNATS {
		log.Warn("no workers configured (--worker or workers: in --config) and no registry (--event-plane nats): every request will get 503")
	}
	svc, err := service.New(cfg, service.Options{Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter serve: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", cfg.Addr())
	if err != nil {
		svc.Close()
		fmt.Fprintf(stderr, "kvrouter serve: %v\n", err)
		return 1
	}
	// Run serves at once; an external NATS server that is down or
	// restarting is retried (see /ready), and only a misconfiguration
	// (credentials refused, TLS) ends it early.
	if err := svc.Run(ctx, ln); err != nil {
		if errors.Is(err, service.ErrStartup) {
			fmt.Fprintf(stderr, "kvrouter serve: %v\n(check --nats-url and the --nats-token/--nats-user/--nats-creds/--nats-nkey/--nats-tls-* options)\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "kvrouter serve: %v\n", err)
		return 1
	}
	return 0
}
