package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// postSession posts a completion naming session to r.
func (r *rig) postSession(session, prompt string) (*http.Response, string) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": prompt, "max_tokens": 4})
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(frontend.HeaderSessionID, session)
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp, string(rb)
}

// TestSessionAffinitySharedBetweenReplicas: two routers with replica
// sync and session affinity on one NATS; a session bound by a request to
// the first is known to the second, whose request for it goes to the
// same worker (round-robin routing would otherwise alternate).
func TestSessionAffinitySharedBetweenReplicas(t *testing.T) {
	opts := func(c *config.Config) {
		c.EventPlane.ReplicaSync = true
		c.Queue.SessionAffinityTTLSecs = 60
		c.Router.Mode = "round-robin"
	}
	r1 := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS, cfg: opts})
	r1.waitExact()
	cfg := r1.svc.cfg
	cfg.DataDir = t.TempDir()
	cfg.EventPlane.NATS.URL = r1.svc.Bus().ClientURL()
	cfg.Router.ID = 0
	svc2, err := New(cfg, Options{Logger: discardLog(), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc2.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc2.Run(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second router: %v", err)
		}
	}()
	r2 := &rig{t: t, fleet: r1.fleet, svc: svc2, url: "http://" + ln.Addr().String(), logs: r1.logs, client: r1.client}
	r2.waitExact()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		p1, p2 := r1.metric("kvrouter_replica_peers"), r2.metric("kvrouter_replica_peers")
		return p1 == 1 && p2 == 1 && svc2.sess != nil, fmt.Sprintf("peers %v and %v", p1, p2)
	}, "each router sees the other, sessions shared")

	resp, body := r1.postSession("conv-7", "hello there, a first turn")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first turn: %d %s", resp.StatusCode, body)
	}
	first := resp.Header.Get(frontend.HeaderWorker)
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, ok := svc2.front.SessionWorker("conv-7")
		return ok, "the second router has no binding for conv-7"
	}, "the binding reached the second router")
	for i := range 3 {
		resp, body := r2.postSession("conv-7", fmt.Sprintf("turn %d of the conversation", i+2))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(frontend.HeaderWorker) != first {
			t.Fatalf("turn %d on the second router: %d on %q, want %q (%s)", i+2, resp.StatusCode, resp.Header.Get(frontend.HeaderWorker), first, body)
		}
	}
}
