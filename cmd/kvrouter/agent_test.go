package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestAgentFlagErrors(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"agent", "--name", "a"}, nil, io.Discard, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "--url is required") {
		t.Fatalf("code %d, stderr %s", code, stderr.String())
	}
}

// `kvrouter mocker --event-plane nats` registers its worker in the NATS KV
// registry and publishes RouterEvents on the Dynamo subject.
func TestMockerEventPlaneNATS(t *testing.T) {
	ns := natstest.StartServer(t, -1, true)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	events, err := nc.SubscribeSync(dynamo.Subject("dynamo", "backend"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg, err := registry.OpenRegistry(ctx, js, registry.DefaultRegistryConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := reg.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"mocker", "--event-plane", "nats", "--nats-url", ns.ClientURL(), "--host", "127.0.0.1", "--port", "0",
			"--block-size", "4", "--speedup-ratio", "1000", "--worker-id", "77", "--log-level", "error"}, nil, io.Discard, io.Discard)
	}()
	var rec fleet.WorkerRecord
	for rec.URL == "" {
		select {
		case c := <-w.C():
			if c.Kind == fleet.Put {
				rec = c.Value
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no registration")
		}
	}
	if rec.ID != 77 || rec.Events.Kind != fleet.EventsNATS || rec.BlockSize != 4 {
		t.Fatalf("record %+v", rec)
	}
	resp, err := http.Post(rec.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b c d e f g h i","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	m, err := events.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ev, env, err := dynamo.Decode(m.Data)
	// A fresh worker numbers its events from 0 (issue 6): this is its first.
	if err != nil || env == nil || ev.Worker.ID != 77 || ev.ID != 0 {
		t.Fatalf("event %+v env %v err %v", ev, env, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("mocker exit %d", code)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestAgentNATSSecretsFromEnv: the agent takes KVROUTER_NATS_TOKEN (and
// user/password) from the environment unless the flag is given, like
// every other option, and -h never shows it.
func TestAgentNATSSecretsFromEnv(t *testing.T) {
	env := []string{"KVROUTER_NATS_TOKEN=from-env", "KVROUTER_NATS_PASSWORD=pw"}
	for _, tc := range []struct {
		args      []string
		token, pw string
	}{
		{nil, "from-env", "pw"},
		{[]string{"--nats-token", "from-flag"}, "from-flag", "pw"},
	} {
		a, _, err := config.LoadCommand[config.Agent](append([]string{"--url", "http://127.0.0.1:1", "--name", "w"}, tc.args...),
			config.DefaultAgent, config.Options{Name: "agent", Environ: env})
		if err != nil {
			t.Fatal(err)
		}
		if nc := a.NATS; nc.Token != tc.token || nc.Password != tc.pw || nc.User != "" {
			t.Errorf("%v: token %q password %q user %q, want %q %q \"\"", tc.args, nc.Token, nc.Password, nc.User, tc.token, tc.pw)
		}
	}
	t.Setenv("KVROUTER_NATS_TOKEN", "s3cret-token")
	var stdout bytes.Buffer
	if code := run(context.Background(), []string{"agent", "-h"}, nil, &stdout, io.Discard); code != 0 {
		t.Fatalf("agent -h exited %d", code)
	}
	if !strings.Contains(stdout.String(), "-nats-token") || strings.Contains(stdout.String(), "s3cret-token") {
		t.Fatalf("agent -h must list --nats-token without the token from the environment:\n%s", stdout.String())
	}
}
