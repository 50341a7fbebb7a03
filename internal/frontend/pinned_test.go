package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

// pinnedRouter pins every Route and Plan to one worker, as a client
// naming its worker would.
type pinnedRouter struct {
	Router
	w kvevent.WorkerID
}

func (p pinnedRouter) Route(req router.Request) (router.Decision, error) {
	req.PinnedWorker, req.HasPinned = p.w, true
	return p.Router.Route(req)
}

func (p pinnedRouter) Plan(req router.Request) (router.Decision, error) {
	req.PinnedWorker, req.HasPinned = p.w, true
	return p.Router.Plan(req)
}

// TestPinnedBusyGives503 checks that a request pinned to a worker over a
// busy threshold is answered 503 pinned_worker_overloaded naming that
// worker (w1) and the threshold, with Retry-After, while the other worker
// is idle; /v1/route explains it the same way.
func TestPinnedBusyGives503(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2, speedup: 5, rcfg: func(c *router.Config) {
		c.Scheduler.ActiveDecodeBlocksThreshold = 0.001 // 2 of 2048 blocks
	}, wrap: func(r Router) Router { return pinnedRouter{Router: r, w: 1} }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": words(3, 100), "max_tokens": 2000, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", fl.front.URL+"/v1/completions", strings.NewReader(string(b)))
	resp, err := fl.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	const want = "pinned worker w1 is overloaded (busy: active decode blocks over threshold)"
	r2, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1})
	if r2.StatusCode != 503 || r2.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"code":"pinned_worker_overloaded"`) ||
		!strings.Contains(string(body), want) {
		t.Fatalf("status %d retry-after %q: %s", r2.StatusCode, r2.Header.Get("Retry-After"), body)
	}
	r3, body := fl.do("POST", "/v1/route", map[string]any{"prompt": "hi"})
	if r3.StatusCode != 503 || !strings.Contains(string(body), want) {
		t.Fatalf("route: status %d: %s", r3.StatusCode, body)
	}
	cancel()
	resp.Body.Close()
	fl.waitIdle()
}
