package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

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
	r2, stop2 := r1.secondRouter(0)
	defer stop2()
	r2.waitExact()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		p1, p2 := r1.metric("kvrouter_replica_peers"), r2.metric("kvrouter_replica_peers")
		return p1 == 1 && p2 == 1 && r2.svc.sess != nil, fmt.Sprintf("peers %v and %v", p1, p2)
	}, "each router sees the other, sessions shared")

	resp, body := r1.postSession("conv-7", "hello there, a first turn")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first turn: %d %s", resp.StatusCode, body)
	}
	first := resp.Header.Get(frontend.HeaderWorker)
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, ok := r2.svc.front.SessionWorker("conv-7")
		return ok, "the second router has no binding for conv-7"
	}, "the binding reached the second router")
	for i := range 3 {
		resp, body := r2.postSession("conv-7", fmt.Sprintf("turn %d of the conversation", i+2))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(frontend.HeaderWorker) != first {
			t.Fatalf("turn %d on the second router: %d on %q, want %q (%s)", i+2, resp.StatusCode, resp.Header.Get(frontend.HeaderWorker), first, body)
		}
	}
}
