package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// saturating makes any worker holding more than 2 KV blocks (of the
// harness's 2,048) saturated: one request of a few dozen tokens fills a
// worker until it ends.
func saturating(mod func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Queue.Thresholds = scheduler.Thresholds{ActiveDecodeBlocksThreshold: 0.001}
		if mod != nil {
			mod(c)
		}
	}
}

func (fl *testFleet) queueDepth() float64 { return fl.metric("kvrouter_queue_depth") }

// waitBlockerRunning waits until the one request sent so far runs (is
// booked), so that the next one meets a saturated fleet instead of
// bypassing the queue before the blocker is counted.
func (fl *testFleet) waitBlockerRunning() {
	fl.t.Helper()
	poll.UntilState(fl.t, 5*time.Second, func() (bool, string) {
		return fl.activeRequests() == 1, fmt.Sprintf("%d running", fl.activeRequests())
	}, "the blocker running")
}

// waitQueuedLonger waits until exactly one request is in the queue and
// has waited longer than d (past a 200 ms TTFT target, for the tests of
// late release).
func (fl *testFleet) waitQueuedLonger(d time.Duration) {
	fl.t.Helper()
	poll.UntilState(fl.t, 5*time.Second, func() (bool, string) {
		g := fl.f.gate
		v := g.view()
		waited := time.Duration(0)
		if !v.OldestArrival.IsZero() {
			waited = g.clock().Sub(v.OldestArrival)
		}
		return v.Waiting == 1 && waited > d, fmt.Sprintf("%d waiting for %v", v.Waiting, waited)
	}, fmt.Sprintf("the request queued for longer than %v", d))
}

// statusQueue reads the status page's JSON queue view (nil when the
// queue is off).
func (fl *testFleet) statusQueue() (*statusQueueJSON, []byte) {
	fl.t.Helper()
	_, sb := fl.do("GET", "/?format=json", nil)
	var st struct {
		Queue *statusQueueJSON `json:"queue"`
	}
	if err := json.Unmarshal(sb, &st); err != nil {
		fl.t.Fatalf("status JSON: %s: %v", sb, err)
	}
	return st.Queue, sb
}

// statusQueueJSON is the part of the status page's queue view the
// per-model and per-adapter queue tests read.
type statusQueueJSON struct {
	Waiting int              `json:"waiting"`
	Models  []queueModelJSON `json:"models"`
}

// startStream starts a streaming completion that runs until cancelled or
// done, and returns its cancel and a channel closed when it ended.
func (fl *testFleet) startStream(prompt string, maxTokens int, hdr ...string) (context.CancelFunc, <-chan int) {
	return fl.startStreamBody(fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"stream":true}`, prompt, maxTokens), hdr...)
}

// startStreamBody is startStream with the completion's body as given.
func (fl *testFleet) startStreamBody(body string, hdr ...string) (context.CancelFunc, <-chan int) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fl.front.URL+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	go func() {
		resp, err := fl.client.Do(req)
		if err != nil {
			done <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	return cancel, done
}

// floodAllOK sends n short completions at once (request i with the
// headers hdr(i)) and fails the test unless every one is answered 200.
func (fl *testFleet) floodAllOK(n int, hdr func(i int) []string) {
	fl.t.Helper()
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			resp, _ := fl.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":8}`, words(i, 60)), hdr(i)...)
			codes[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			fl.t.Fatalf("request %d: status %d, want 200 (codes %v)", i, c, codes)
		}
	}
}

// TestQueueFloodWaitsInsteadOfFailing: 24 concurrent requests on one
// worker that one request saturates: every one succeeds, and the queue
// held them (depth seen above 0, "queued" counted).
func TestQueueFloodWaitsInsteadOfFailing(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 200, cfg: saturating(nil)})
	fl.floodAllOK(24, func(int) []string { return nil })
	if q := fl.metric("kvrouter_queue_requests_total", "outcome", "queued"); q < 1 {
		t.Fatalf("%v requests queued: the flood did not saturate the worker", q)
	}
	if rel := fl.metric("kvrouter_queue_requests_total", "outcome", "released"); rel != fl.metric("kvrouter_queue_requests_total", "outcome", "queued") {
		t.Fatalf("released %v of %v queued", rel, fl.metric("kvrouter_queue_requests_total", "outcome", "queued"))
	}
	fl.waitIdle()
	// The tenant's in-flight count ends when each handler returns, after
	// its client has read the answer: poll for it (under the gate's lock).
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		fl.f.gate.mu.Lock()
		n := fl.f.gate.q.InFlight("")
		fl.f.gate.mu.Unlock()
		return fl.queueDepth() == 0 && n == 0, fmt.Sprintf("depth %v, in flight %d", fl.queueDepth(), n)
	}, "the queue empty and nothing in flight after the flood")
}

// TestQueueStaggeredReleaseServesEveryone: staggered release on (a gap
// far longer than these prefills, so any release of the crowding tenant
// near another's predicted end is held), two workers and two tenants,
// one sending five times the other's requests at once: every request is
// served (a hold always ends: a request of the other tenant or the
// wake-up timer releases the next), and nothing of the queue is left
// afterwards (no waiting request's plan, no tenant count). The same
// with the automatic gap.
func TestQueueStaggeredReleaseServesEveryone(t *testing.T) {
	t.Run("gap 30ms", func(t *testing.T) {
		testStaggeredServesEveryone(t, func(a *admission.Config) { a.StaggerGap = 30 * time.Millisecond })
	})
	t.Run("auto", func(t *testing.T) {
		testStaggeredServesEveryone(t, func(a *admission.Config) { a.StaggerAuto = true })
	})
}

func testStaggeredServesEveryone(t *testing.T, stagger func(*admission.Config)) {
	fl := newFleet(t, fleetOpt{workers: 2, speedup: 200, cfg: saturating(func(c *Config) {
		stagger(&c.Queue.Admission)
		c.Queue.Admission.BurstCredit = 1024
	})})
	fl.floodAllOK(24, func(i int) []string {
		if i%6 == 5 {
			return []string{"X-Tenant-ID", "b"}
		}
		return []string{"X-Tenant-ID", "a"}
	})
	if q := fl.metric("kvrouter_queue_requests_total", "outcome", "queued"); q < 1 {
		t.Fatalf("%v requests queued: the flood did not saturate the workers", q)
	}
	fl.waitIdle()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		depth, g := fl.queueDepth(), fl.f.gate // the depth gauge takes the gate's lock
		g.mu.Lock()
		na, nb, plans := g.q.InFlight("a"), g.q.InFlight("b"), len(g.planned)
		g.mu.Unlock()
		return depth == 0 && na == 0 && nb == 0 && plans == 0,
			fmt.Sprintf("depth %v, in flight a %d b %d, %d plans kept", depth, na, nb, plans)
	}, "the queue empty, nothing in flight and no plan kept after the flood")
	t.Logf("%v releases held", fl.metric("kvrouter_queue_stagger_holds_total"))
}

// TestQueueDisconnectFreesEverything: a request waiting behind a long
// stream leaves the queue the moment its client goes; nothing of it is
// left (no waiter, no booking, no tenant count), and the blocker's end
// leaves the router idle.
func TestQueueDisconnectFreesEverything(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 1, cfg: saturating(nil)})
	stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
	fl.waitBlockerRunning()
	cancel, waited := fl.startStream(words(2, 60), 8)
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return fl.queueDepth() == 1, fmt.Sprintf("depth %v", fl.queueDepth())
	}, "the second request queued")
	// The status page shows it.
	_, sb := fl.do("GET", "/?format=json", nil)
	var st struct {
		Queue *struct {
			Policy  string `json:"policy"`
			Waiting int    `json:"waiting"`
			Tenants []struct {
				Tenant   string `json:"tenant"`
				Waiting  int    `json:"waiting"`
				InFlight int    `json:"in_flight"`
			} `json:"tenants"`
		} `json:"queue"`
	}
	if err := json.Unmarshal(sb, &st); err != nil || st.Queue == nil || st.Queue.Waiting != 1 || st.Queue.Policy != "fcfs" ||
		len(st.Queue.Tenants) != 1 || st.Queue.Tenants[0].Waiting != 1 || st.Queue.Tenants[0].InFlight != 1 {
		t.Fatalf("status JSON queue: %s (%v)", sb, err)
	}
	cancel()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return fl.queueDepth() == 0, fmt.Sprintf("depth %v", fl.queueDepth())
	}, "the queue empty after the client left")
	<-waited
	if d := fl.metric("kvrouter_queue_requests_total", "outcome", "disconnected"); d != 1 {
		t.Fatalf("disconnected %v, want 1", d)
	}
	fl.f.gate.mu.Lock()
	waiters, inflight := len(fl.f.gate.waiters), fl.f.gate.q.InFlight("")
	fl.f.gate.mu.Unlock()
	if waiters != 0 || inflight != 1 || fl.activeRequests() != 1 {
		t.Fatalf("after the disconnect: %d waiters, tenant in flight %d (want the blocker's 1), %d bookings", waiters, inflight, fl.activeRequests())
	}
	stopBlocker()
	<-blocked
	fl.waitIdle()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		fl.f.gate.mu.Lock()
		defer fl.f.gate.mu.Unlock()
		n := fl.f.gate.q.InFlight("")
		return n == 0, fmt.Sprintf("tenant in flight %d", n)
	}, "the blocker's tenant count ended")
}

// TestQueuePriorityServedFirst: three requests queued behind a blocker
// with priorities 5, 1 and -2 (in that arrival order) are served -2, 1,
// 5 under the priority policy (each saturates the worker, so they run
// one after another).
func TestQueuePriorityServedFirst(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, speedup: 20, cfg: saturating(func(c *Config) { c.Queue.Admission.Policy = admission.PolicyPriority })})
	stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
	defer stopBlocker()
	fl.waitBlockerRunning()
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, p := range []int{5, 1, -2} {
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":64,"priority":%d}`, words(10+i, 60), p)
		if i == 1 {
			// The header says it too; the body's field is not there.
			body = fmt.Sprintf(`{"prompt":%q,"max_tokens":64}`, words(10+i, 60))
		}
		wg.Go(func() {
			resp, _ := fl.do("POST", "/v1/completions", body, "X-Priority", fmt.Sprint(p))
			mu.Lock()
			order = append(order, fmt.Sprintf("%d:%d", p, resp.StatusCode))
			mu.Unlock()
		})
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			return fl.queueDepth() == float64(i+1), fmt.Sprintf("depth %v", fl.queueDepth())
		}, "the request queued")
	}
	stopBlocker()
	<-blocked
	wg.Wait()
	if want := []string{"-2:200", "1:200", "5:200"}; !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v", order, want)
	}
}

// TestQueueTenantCapTimesOutWith429: with a cap of one request in flight
// per tenant, a tenant's second request waits (its first is running) and
// times out with 429, while another tenant's request goes straight
// through.
func TestQueueTenantCapTimesOutWith429(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2, speedup: 1, cfg: func(c *Config) {
		c.Queue.Admission.TenantInFlight = 1
		c.Queue.Timeout = 300 * time.Millisecond
	}})
	stop, done := fl.startStream(words(1, 60), 20000, "X-Tenant-ID", "a")
	defer func() { stop(); <-done }()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return fl.activeRequests() == 1, fmt.Sprintf("%d running", fl.activeRequests())
	}, "a's first request running")
	resp, body := fl.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":2}`, "X-Tenant-ID", "a")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), codeOverShare) {
		t.Fatalf("a's second: %d %s (Retry-After %q), want 429 %s", resp.StatusCode, body, resp.Header.Get("Retry-After"), codeOverShare)
	}
	if resp, body := fl.do("POST", "/v1/completions", `{"prompt":"hello","max_tokens":2}`, "X-Tenant-ID", "b"); resp.StatusCode != http.StatusOK {
		t.Fatalf("b: %d %s", resp.StatusCode, body)
	}
	if n := fl.metric("kvrouter_queue_requests_total", "outcome", "timeout"); n != 1 {
		t.Fatalf("timeouts %v, want 1", n)
	}
}

// TestSessionsStick: with round-robin routing, requests without a
// session alternate between the two workers; requests naming a session
// (either header) all go where its first went.
func TestSessionsStick(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2, cfg: func(c *Config) { c.SessionTTL = time.Minute },
		rcfg: func(c *router.Config) { c.Policy = scheduler.PolicyRoundRobin }})
	served := func(hdr ...string) []string {
		var ws []string
		for i := range 4 {
			resp, body := fl.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, words(i, 20)), hdr...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			ws = append(ws, resp.Header.Get(HeaderWorker))
		}
		return ws
	}
	if ws := served(); ws[0] == ws[1] {
		t.Fatalf("without a session round-robin served %v: the control does not alternate", ws)
	}
	for _, h := range []string{HeaderSessionID, HeaderDynamoSessionID} {
		ws := served(h, "conv-"+h)
		if ws[0] != ws[1] || ws[1] != ws[2] || ws[2] != ws[3] {
			t.Fatalf("%s: served %v, want one worker", h, ws)
		}
	}
}

// TestQueueRefusesALateRequest: with a TTFT target of 200 ms, a request
// that waited longer than that behind a blocker (polled on the queue's
// own clock) is refused with 503 queue_late and Retry-After when it is
// released, its booking freed and its session left unbound; with a
// target of an hour the same wait is served and binds its session.
func TestQueueRefusesALateRequest(t *testing.T) {
	for _, c := range []struct {
		target time.Duration
		status int
		late   float64
	}{{time.Hour, http.StatusOK, 0}, {200 * time.Millisecond, http.StatusServiceUnavailable, 1}} {
		t.Run(c.target.String(), func(t *testing.T) {
			fl := newFleet(t, fleetOpt{workers: 1, speedup: 20, cfg: saturating(func(cfg *Config) {
				cfg.Queue.Admission.TTFTTarget = c.target
				cfg.SessionTTL = time.Minute
			})})
			stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
			defer stopBlocker()
			fl.waitBlockerRunning()
			type answer struct {
				resp *http.Response
				body []byte
			}
			got := make(chan answer, 1)
			go func() {
				resp, body := fl.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, words(2, 60)), HeaderSessionID, "late-conv")
				got <- answer{resp, body}
			}()
			fl.waitQueuedLonger(250 * time.Millisecond)
			stopBlocker()
			<-blocked
			a := <-got
			if a.resp.StatusCode != c.status {
				t.Fatalf("status %d %s, want %d", a.resp.StatusCode, a.body, c.status)
			}
			if c.status == http.StatusServiceUnavailable && (a.resp.Header.Get("Retry-After") == "" || !strings.Contains(string(a.body), codeQueueLate)) {
				t.Fatalf("refusal without Retry-After (%q) or %s: %s", a.resp.Header.Get("Retry-After"), codeQueueLate, a.body)
			}
			if n := fl.metric("kvrouter_queue_requests_total", "outcome", "late"); n != c.late {
				t.Fatalf("late %v, want %v", n, c.late)
			}
			if _, bound := fl.f.SessionWorker("late-conv"); bound != (c.status == http.StatusOK) {
				t.Fatalf("session bound %v after status %d", bound, c.status)
			}
			fl.waitIdle()
			poll.UntilState(t, 5*time.Second, func() (bool, string) {
				g := fl.f.gate
				g.mu.Lock()
				waiters, inflight := len(g.waiters), g.q.InFlight("")
				g.mu.Unlock()
				return waiters == 0 && inflight == 0 && fl.activeRequests() == 0,
					fmt.Sprintf("%d waiters, %d in flight, %d bookings", waiters, inflight, fl.activeRequests())
			}, "nothing left of either request")
		})
	}
}
