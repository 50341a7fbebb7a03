package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// pdRoles is a disaggregated fleet of one prefill worker (w1) and one
// decode worker (w2).
var pdRoles = []router.Role{router.RolePrefill, router.RoleDecode}

// running is the requests the router has booked on worker id.
func (fl *testFleet) running(id kvevent.WorkerID) int { return bookedOn(fl.r.Loads(), id) }

// bookedOn sums the requests booked on worker id's ranks in loads.
func bookedOn(loads []router.Load, id kvevent.WorkerID) int {
	n := 0
	for _, l := range loads {
		if l.Worker.ID == id {
			n += l.ActiveRequests
		}
	}
	return n
}

// inFlight is tenant's count in flight at the admission queue (every
// pool's).
func (fl *testFleet) inFlight(tenant string) int {
	g := fl.f.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.InFlight(tenant)
}

// waitDecodeBlocker polls until a blocking stream runs on the decode
// worker alone, its prefill hop over: the prefill worker is idle, so
// only the decode side is saturated.
func (fl *testFleet) waitDecodeBlocker() {
	fl.t.Helper()
	poll.UntilState(fl.t, 5*time.Second, func() (bool, string) {
		p, d := fl.running(1), fl.running(2)
		return p == 0 && d == 1, fmt.Sprintf("%d booked on the prefill worker, %d on the decode worker", p, d)
	}, "the blocker decoding on the decode worker, the prefill worker idle")
}

// TestPDQueueWaitsForDecodeCapacity: in a disaggregated fleet whose
// decode worker a long stream saturates (its prefill worker idle), two
// requests wait in the admission queue instead of being sent to the
// engines, and once the stream ends are released and served, one after
// the other (each saturates the decode worker in turn: the second is
// released only once the first's turn was settled and it ended).
func TestPDQueueWaitsForDecodeCapacity(t *testing.T) {
	fl := newFleet(t, fleetOpt{roles: pdRoles, speedup: 1, cfg: saturating(nil)})
	stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
	defer stopBlocker()
	fl.waitDecodeBlocker()
	var waited []<-chan int
	for i := range 2 {
		_, done := fl.startStream(words(2+i, 60), 8)
		waited = append(waited, done)
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			return fl.queueDepth() == float64(i+1), fmt.Sprintf("depth %v, %d booked on the prefill worker", fl.queueDepth(), fl.running(1))
		}, "the request waiting in the queue")
	}
	if n := fl.running(1) + fl.running(2); n != 1 {
		t.Fatalf("%d bookings while two requests wait, want the blocker's 1", n)
	}
	stopBlocker()
	<-blocked
	for i, done := range waited {
		if code := <-done; code != http.StatusOK {
			t.Fatalf("waiting request %d: status %d, want 200", i, code)
		}
	}
	if q, rel := fl.metric("kvrouter_queue_requests_total", "outcome", "queued"), fl.metric("kvrouter_queue_requests_total", "outcome", "released"); q != 2 || rel != 2 {
		t.Fatalf("queued %v, released %v; want 2 and 2", q, rel)
	}
	if n := fl.metric("kvrouter_pd_requests_total", "path", "disaggregated"); n != 3 {
		t.Fatalf("%v disaggregated requests, want 3 (the blocker and the released ones)", n)
	}
	fl.waitIdle()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		n := fl.inFlight("")
		return n == 0 && fl.queueDepth() == 0, fmt.Sprintf("in flight %d, depth %v", n, fl.queueDepth())
	}, "nothing in flight or waiting")
}

// TestPDQueueFullAnswersAsAggregated: with one place in the queue, a
// blocking stream saturating the fleet and a second request waiting, a
// third request is refused with the same status, error and Retry-After
// in a disaggregated fleet as in an aggregated one; the waiting request
// is then served in both.
func TestPDQueueFullAnswersAsAggregated(t *testing.T) {
	type answer struct {
		Status     int
		RetryAfter string
		Type, Code string
	}
	run := func(t *testing.T, o fleetOpt) answer {
		o.speedup = 1
		o.cfg = saturating(func(c *Config) { c.Queue.Admission.MaxLen = 1 })
		fl := newFleet(t, o)
		stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
		defer stopBlocker()
		if o.roles != nil {
			fl.waitDecodeBlocker()
		} else {
			// Booked before the next request arrives, or that one
			// bypasses the queue.
			fl.waitBlockerRunning()
		}
		_, waited := fl.startStream(words(2, 60), 8)
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			return fl.queueDepth() == 1, fmt.Sprintf("depth %v", fl.queueDepth())
		}, "the second request waiting in the queue")
		resp, body := fl.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":8}`, words(3, 60)))
		var e struct {
			Error struct {
				Type string `json:"type"`
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("third request: %d %s: %v", resp.StatusCode, body, err)
		}
		stopBlocker()
		<-blocked
		if code := <-waited; code != http.StatusOK {
			t.Fatalf("the waiting request: status %d, want 200", code)
		}
		if n := fl.metric("kvrouter_queue_requests_total", "outcome", "full"); n != 1 {
			t.Fatalf("%v requests refused by a full queue, want 1", n)
		}
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), e.Error.Type, e.Error.Code}
	}
	var agg, pd answer
	t.Run("aggregated", func(t *testing.T) { agg = run(t, fleetOpt{workers: 1}) })
	t.Run("disaggregated", func(t *testing.T) { pd = run(t, fleetOpt{roles: pdRoles}) })
	want := answer{http.StatusServiceUnavailable, "1", typeOverloaded, codeOverloaded}
	if agg != want || pd != want {
		t.Fatalf("full queue: aggregated %+v, disaggregated %+v; want both %+v", agg, pd, want)
	}
}

// TestPDQueueTenantCountEnds: with a cap of one request in flight per
// tenant, a disaggregated request is counted in flight for its tenant
// while it runs (the tenant's next request waits, and times out with
// 429) and its count ends on every path: served, its client gone
// mid-decode, its prefill hop failed and retried with the prefill hop
// bypassed, its decode worker failed. Each next request of the tenant
// goes straight through (a count left over would hold it to 429).
func TestPDQueueTenantCountEnds(t *testing.T) {
	fl := newFleet(t, fleetOpt{roles: pdRoles, speedup: 1, cfg: func(c *Config) {
		c.Queue.Admission.TenantInFlight = 1
		c.Queue.Timeout = 300 * time.Millisecond
	}})
	tenant := []string{"X-Tenant-ID", "a"}
	body := func(seed int) string { return fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, words(seed, 60)) }
	ended := func(when string) {
		t.Helper()
		fl.waitIdle()
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			n := fl.inFlight("a")
			return n == 0, fmt.Sprintf("tenant a in flight %d", n)
		}, "tenant a's count ended "+when)
	}

	resp, b := fl.do("POST", "/v1/completions", body(1), tenant...)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderPrefillWorker) != "w1" {
		t.Fatalf("served: %d %s (prefill worker %q), want 200 from w1's prefill", resp.StatusCode, b, resp.Header.Get(HeaderPrefillWorker))
	}
	ended("after a served request")

	stop, done := fl.startStream(words(2, 60), 20000, tenant...)
	defer stop()
	fl.waitDecodeBlocker()
	if n := fl.inFlight("a"); n != 1 {
		t.Fatalf("tenant a in flight %d while its stream decodes, want 1", n)
	}
	resp, b = fl.do("POST", "/v1/completions", body(3), tenant...)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("tenant a's second request at its cap: %d %s, want 429", resp.StatusCode, b)
	}
	stop() // the client leaves mid-decode
	<-done
	ended("after its client left mid-decode")

	fl.mocks[0].stop() // the prefill worker fails: retried, then bypassed
	resp, b = fl.do("POST", "/v1/completions", body(4), tenant...)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderPrefillWorker) != "" || resp.Header.Get(HeaderWorker) != "w2" {
		t.Fatalf("prefill worker down: %d %s (prefill worker %q, worker %q), want 200 from w2 bypassing the prefill hop",
			resp.StatusCode, b, resp.Header.Get(HeaderPrefillWorker), resp.Header.Get(HeaderWorker))
	}
	if f, p := fl.metric("kvrouter_pd_prefill_failures_total"), fl.metric("kvrouter_pd_requests_total", "path", "bypass"); f < 1 || p != 1 {
		t.Fatalf("%v prefill failures, %v bypasses; want at least 1 and 1", f, p)
	}
	ended("after a prefill failure, retried and bypassed")

	fl.mocks[1].stop() // the decode worker fails too
	if resp, b = fl.do("POST", "/v1/completions", body(5), tenant...); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("every worker down: %d %s, want 502", resp.StatusCode, b)
	}
	ended("after a decode failure")

	// Each request was admitted once (no retry went through the queue
	// again), the one at the cap queued and timed out.
	if n := fl.metric("kvrouter_queue_requests_total", "outcome", "bypassed"); n != 4 {
		t.Fatalf("%v requests admitted at once, want 4", n)
	}
	if n := fl.metric("kvrouter_queue_requests_total", "outcome", "timeout"); n != 1 {
		t.Fatalf("%v requests timed out in the queue, want 1", n)
	}
}

// TestPDQueueRefusesALateRequest: with a TTFT target of 200 ms, a
// disaggregated request that waited longer than that behind a blocker
// (polled on the queue's own clock) is refused with 503 queue_late and
// Retry-After when it is released, both of its hops' bookings freed and
// its tenant's count ended; with a target of an hour the same wait is
// served.
func TestPDQueueRefusesALateRequest(t *testing.T) {
	for _, c := range []struct {
		target time.Duration
		status int
		late   float64
	}{{time.Hour, http.StatusOK, 0}, {200 * time.Millisecond, http.StatusServiceUnavailable, 1}} {
		t.Run(c.target.String(), func(t *testing.T) {
			fl := newFleet(t, fleetOpt{roles: pdRoles, speedup: 1, cfg: saturating(func(cfg *Config) {
				cfg.Queue.Admission.TTFTTarget = c.target
			})})
			stopBlocker, blocked := fl.startStream(words(1, 60), 20000)
			defer stopBlocker()
			fl.waitDecodeBlocker()
			code, answer := 0, make(chan []byte, 1)
			go func() {
				resp, body := fl.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, words(2, 60)))
				if resp.Header.Get("Retry-After") == "" {
					body = append(body, " (no Retry-After)"...)
				}
				code = resp.StatusCode
				answer <- body
			}()
			fl.waitQueuedLonger(250 * time.Millisecond)
			stopBlocker()
			<-blocked
			body := <-answer
			if code != c.status {
				t.Fatalf("status %d %s, want %d", code, body, c.status)
			}
			if c.status == http.StatusServiceUnavailable && (!strings.Contains(string(body), codeQueueLate) || strings.Contains(string(body), "no Retry-After")) {
				t.Fatalf("refusal without %s or Retry-After: %s", codeQueueLate, body)
			}
			if n := fl.metric("kvrouter_queue_requests_total", "outcome", "late"); n != c.late {
				t.Fatalf("late %v, want %v", n, c.late)
			}
			fl.waitIdle()
			poll.UntilState(t, 5*time.Second, func() (bool, string) {
				n := fl.inFlight("")
				return n == 0, fmt.Sprintf("in flight %d", n)
			}, "nothing in flight")
		})
	}
}
