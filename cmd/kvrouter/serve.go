package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/service"
)

func init() {
	register("serve", command{summary: "run the router: workers from the NATS registry and the static list, their KV events, the OpenAI front door", run: runServe})
}

const serveUsage = `Usage: kvrouter serve [flags]

Routes OpenAI requests to the workers that register in the NATS registry (kvrouter agent, the
mocker with --event-plane nats) and those listed with --worker (or the config file's workers:),
following each worker's KV events: RouterEvents on the event plane (NATS by default, embedded
unless --nats-url) or an engine's own vLLM/SGLang ZMQ stream. See docs/config.md for every option.`

func runServe(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
	cfg, code, ok := loadConfig("serve", serveUsage, args, nil, stderr)
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

// loadConfig reads the layered configuration for a command; on failure it
// has printed why and returns the exit code (0 for -h).
func loadConfig(name, usage string, args []string, extra func(*flag.FlagSet), stderr io.Writer) (config.Config, int, bool) {
	cfg, err := config.Load(args, config.Options{Name: name, Environ: os.Environ(), Output: stderr, Usage: usage, Extra: extra})
	switch {
	case err == nil:
		return cfg, 0, true
	case errors.Is(err, flag.ErrHelp):
		return cfg, 0, false
	case errors.Is(err, config.ErrInvalid):
		fmt.Fprintf(stderr, "kvrouter %s: %v\n", name, err)
	}
	// Other errors are the flag package's, already printed with the usage.
	return cfg, 2, false
}
