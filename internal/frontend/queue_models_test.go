package frontend

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/admission"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// modelFleet is a front door over two model pools: the default model
// (testModel) on worker 1 (w1), at speedup 1 so that a long stream holds
// it, and model-b on worker 2 (w2).
type modelFleet struct {
	*testFleet
	pools *router.Pools
}

func newModelFleet(t *testing.T, cfg func(*Config)) *modelFleet {
	t.Helper()
	return newPoolsFleet(t, cfg, map[uint64]poolWorker{1: {"", testModel, 1, nil}, 2: {"model-b", "model-b", 200, nil}},
		func(pools *router.Pools) Models {
			return testModels{pools: pools, files: map[string]ModelFiles{"model-b": {}}}
		})
}

// poolWorker is one mock worker of newPoolsFleet: its pool ("" the
// default model), the model it serves, its speedup and the LoRA adapters
// it has loaded.
type poolWorker struct {
	pool, model string
	speedup     float64
	adapters    []string
}

// newPoolsFleet is a front door over model pools: worker id (named "w"
// and its id) as workers says, the fleet's models as models says.
func newPoolsFleet(t *testing.T, cfg func(*Config), workers map[uint64]poolWorker, models func(*router.Pools) Models) *modelFleet {
	t.Helper()
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := router.NewSerial(x)
	rc := router.DefaultConfig()
	rc.BlockSize = 16
	pools, err := router.NewPools(testModel, rc, idx, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := &testDir{}
	for id, m := range workers {
		if err := pools.AddWorker(m.pool, router.WorkerInfo{ID: kvevent.WorkerID(id), BlockSize: 16, Mode: router.Approximate, KVCapacityBlocks: 2048}); err != nil {
			t.Fatal(err)
		}
		mock := startMockConfig(t, id, m.speedup, func(c *server.Config) { c.Model, c.LoRAAdapters = m.model, m.adapters })
		dir.set(WorkerEntry{ID: kvevent.WorkerID(id), Name: "w" + strconv.FormatUint(id, 10), URL: mock.url,
			Status: fleet.Status{State: fleet.StateApprox, Reason: "no events", Since: time.Now()}})
	}
	c := DefaultConfig()
	cfg(&c)
	reg := prometheus.NewRegistry()
	f, err := New(c, Deps{Router: pools, Directory: dir, Tokenizer: testTokenizer(t), ChatTemplate: testTemplate(t), Index: idx,
		Models: models(pools), Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(f.Handler())
	fl := &testFleet{t: t, f: f, reg: reg, front: front, client: &http.Client{Transport: &http.Transport{}}, dir: dir}
	t.Cleanup(func() { front.Close(); fl.client.CloseIdleConnections(); f.CloseIdleConnections() })
	return &modelFleet{testFleet: fl, pools: pools}
}

// running is worker id's booked requests, over every pool.
func (mf *modelFleet) running(id kvevent.WorkerID) int { return bookedOn(mf.pools.Loads(), id) }

// gateState is the gate's queues and counts, read under its lock.
func (mf *modelFleet) gateState() (pools []queueKey, waiting int, waiters int, ledger map[string]int) {
	g := mf.f.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	ledger = map[string]int{}
	for _, tnt := range []string{"", "a", "b"} {
		if n := g.ledger.InFlight(tnt); n > 0 {
			ledger[tnt] = n
		}
	}
	return append([]queueKey(nil), g.names...), g.waiting(), len(g.waiters), ledger
}

// TestQueuePerModel: model A's only worker is saturated by a long stream
// while model-b's is idle. A second request of A waits in the queue
// (depth 1, "queued" counted, shown on the status page), while model-b's
// requests are served at once ("bypassed"); model-b's request ending
// kicks the queue, and A's request still waits (its pool has no room:
// the capacity that freed is another model's); once A's blocker ends,
// A's request is released and served by A's worker. Nothing of the
// gate is left afterwards.
func TestQueuePerModel(t *testing.T) {
	mf := newModelFleet(t, saturating(nil))
	stopBlocker, blocked := mf.startStream(words(1, 60), 20000)
	defer stopBlocker()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(1) == 1, fmt.Sprintf("%d running on w1", mf.running(1))
	}, "A's blocker running on w1")
	if !mf.pools.PoolSaturated("", mf.f.cfg.Queue.Thresholds) || mf.pools.Saturated(mf.f.cfg.Queue.Thresholds) {
		t.Fatal("the blocker did not saturate A's pool alone")
	}

	type answer struct {
		status int
		worker string
	}
	got := make(chan answer, 1)
	go func() {
		resp, _ := mf.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":4}`, words(2, 60)))
		got <- answer{resp.StatusCode, resp.Header.Get(HeaderWorker)}
	}()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.queueDepth() == 1, fmt.Sprintf("depth %v", mf.queueDepth())
	}, "A's second request queued")
	if q := mf.metric("kvrouter_queue_requests_total", "outcome", "queued"); q != 1 {
		t.Fatalf("queued %v, want 1", q)
	}
	if q, sb := mf.statusQueue(); q == nil || q.Waiting != 1 ||
		len(q.Models) != 1 || q.Models[0] != (queueModelJSON{Model: testModel, Waiting: 1}) {
		t.Fatalf("status JSON queue: %s", sb)
	}

	for i := range 3 {
		resp, body := mf.do("POST", "/v1/completions", fmt.Sprintf(`{"model":"model-b","prompt":%q,"max_tokens":2}`, words(20+i, 60)))
		if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderWorker) != "w2" {
			t.Fatalf("model-b request %d: %d on %q: %s", i, resp.StatusCode, resp.Header.Get(HeaderWorker), body)
		}
	}
	if b := mf.metric("kvrouter_queue_requests_total", "outcome", "bypassed"); b != 4 {
		t.Fatalf("bypassed %v, want 4 (A's blocker and model-b's three)", b)
	}
	// model-b's requests have ended once its queue is dropped (their
	// counts done); kick again with its pool idle: A's must still wait.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		pools, _, _, _ := mf.gateState()
		return len(pools) == 1 && mf.running(2) == 0, fmt.Sprintf("queues %q, %d running on w2", pools, mf.running(2))
	}, "model-b's requests ended")
	mf.f.gate.kick()
	if _, waiting, waiters, _ := mf.gateState(); waiting != 1 || waiters != 1 || mf.metric("kvrouter_queue_requests_total", "outcome", "released") != 0 {
		t.Fatalf("after model-b freed: %d waiting, %d waiters, %v released; want A's request still waiting", waiting, waiters,
			mf.metric("kvrouter_queue_requests_total", "outcome", "released"))
	}

	stopBlocker()
	<-blocked
	a := <-got
	if a.status != http.StatusOK || a.worker != "w1" {
		t.Fatalf("A's queued request: %d on %q, want 200 on w1", a.status, a.worker)
	}
	if r := mf.metric("kvrouter_queue_requests_total", "outcome", "released"); r != 1 {
		t.Fatalf("released %v, want 1", r)
	}
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		pools, waiting, waiters, ledger := mf.gateState()
		return len(pools) == 1 && waiting == 0 && waiters == 0 && len(ledger) == 0 && mf.running(1)+mf.running(2) == 0,
			fmt.Sprintf("queues %q, %d waiting, %d waiters, in flight %v, %d booked", pools, waiting, waiters, ledger, mf.running(1)+mf.running(2))
	}, "nothing left of the gate")
}

// TestQueueTenantCapSpansModels: with a cap of one request in flight per
// tenant, tenant a's long stream on model A holds a's cap for model-b
// too: a's model-b request waits and times out with 429, while tenant
// b's model-b request goes straight through.
func TestQueueTenantCapSpansModels(t *testing.T) {
	mf := newModelFleet(t, func(c *Config) {
		c.Queue.Admission.TenantInFlight = 1
		c.Queue.Timeout = 300 * time.Millisecond
	})
	stop, done := mf.startStream(words(1, 60), 20000, "X-Tenant-ID", "a")
	defer func() { stop(); <-done }()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(1) == 1, fmt.Sprintf("%d running on w1", mf.running(1))
	}, "a's first request running")
	resp, body := mf.do("POST", "/v1/completions", `{"model":"model-b","prompt":"hello","max_tokens":2}`, "X-Tenant-ID", "a")
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), codeOverShare) {
		t.Fatalf("a's model-b request: %d %s, want 429 %s", resp.StatusCode, body, codeOverShare)
	}
	if resp, body := mf.do("POST", "/v1/completions", `{"model":"model-b","prompt":"hello","max_tokens":2}`, "X-Tenant-ID", "b"); resp.StatusCode != http.StatusOK {
		t.Fatalf("b's model-b request: %d %s", resp.StatusCode, body)
	}
	if n := mf.metric("kvrouter_queue_requests_total", "outcome", "timeout"); n != 1 {
		t.Fatalf("timeouts %v, want 1", n)
	}
}

// poolsSaturated is a Router whose pools are saturated as sat says, and
// sets of workers (named by pool and fmt.Sprint of the set) as workers
// says; the gate's kick asks it nothing else.
type poolsSaturated struct {
	Router
	mu      sync.Mutex
	sat     map[string]bool
	workers map[string]bool
}

func (p *poolsSaturated) PoolSaturated(model string, _ scheduler.Thresholds) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sat[model]
}

func (p *poolsSaturated) WorkersSaturated(model string, _ scheduler.Thresholds, allowed []kvevent.WorkerID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.workers[model+fmt.Sprint(allowed)]
}

// releasingGate is a gate over rt whose queues tests fill by hand (push)
// and empty one release at a time (releaseN).
type releasingGate struct {
	t     *testing.T
	g     *gate
	chans map[string]chan struct{}
}

func newReleasingGate(t *testing.T, rt Router) *releasingGate {
	cfg := DefaultQueueConfig()
	cfg.Thresholds = scheduler.Thresholds{ActiveDecodeBlocksThreshold: 0.5}
	g, err := newGate(cfg, rt, time.Now, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &releasingGate{t: t, g: g, chans: map[string]chan struct{}{}}
}

// push queues request id in k's queue, with a waiter.
func (rg *releasingGate) push(k queueKey, id string) {
	g := rg.g
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, _, err := g.queue(k).Push(admission.Entry{ID: id, Arrival: time.Now()}); err != nil {
		rg.t.Fatal(err)
	}
	rg.chans[id] = make(chan struct{}, 1)
	g.waiters[id] = rg.chans[id]
}

// released kicks, settles and returns the id released (or "").
func (rg *releasingGate) released() string {
	g := rg.g
	g.kick()
	g.mu.Lock()
	g.releasing = 0
	g.mu.Unlock()
	for id, ch := range rg.chans {
		select {
		case <-ch:
			delete(rg.chans, id)
			return id
		default:
		}
	}
	return ""
}

// releaseN releases n times and joins the ids.
func (rg *releasingGate) releaseN(n int) string {
	var order []string
	for range n {
		order = append(order, rg.released())
	}
	return strings.Join(order, " ")
}

// TestQueueReleasesRoundRobinOverPools: three pools ("" the default, b,
// c) with two requests waiting each and room in all: kick releases one
// at a time, each pool in turn from the one after the last released
// (the first turn after the default's, as if it had released last): b,
// c, default, b, c, default. With c saturated (and a third request of
// c's: the status page's models list c first, with the most waiting)
// its requests wait and the turns go to the others (b first: the
// default released last); once it has room, c's are released.
func TestQueueReleasesRoundRobinOverPools(t *testing.T) {
	rt := &poolsSaturated{sat: map[string]bool{}}
	rg := newReleasingGate(t, rt)
	g, releaseN := rg.g, rg.releaseN
	push := func(pool, id string) { rg.push(queueKey{pool: pool}, id) }
	saturate := func(pool string, on bool) {
		rt.mu.Lock()
		rt.sat[pool] = on
		rt.mu.Unlock()
	}
	for _, p := range []string{"", "b", "c"} {
		push(p, p+"1")
		push(p, p+"2")
	}
	if got, want := releaseN(6), "b1 c1 1 b2 c2 2"; got != want {
		t.Fatalf("released %q, want %q", got, want)
	}
	for _, p := range []string{"", "b", "c"} {
		push(p, p+"3")
		push(p, p+"4")
	}
	push("c", "c5")
	if got, want := fmt.Sprint(g.byPool(20)), "[{{c } 3} {{ } 2} {{b } 2}]"; got != want {
		t.Fatalf("pools by waiting %s, want %s", got, want)
	}
	saturate("c", true)
	if got, want := releaseN(5), "b3 3 b4 4 "; got != want {
		t.Fatalf("c saturated: released %q, want %q", got, want)
	}
	saturate("c", false)
	if got, want := releaseN(4), "c3 c4 c5 "; got != want {
		t.Fatalf("c with room again: released %q, want %q", got, want)
	}
}

// TestQueueReleasesAdapterQueuesInTurn: the default pool's queue and
// LoRA adapter x's (loaded on worker 1) hold two requests each. With
// worker 1 saturated but the pool not, the pool's requests are released
// and x's wait (its queue is judged by its workers, not the pool); once
// worker 1 has room, x's are released, and with both queues filled again
// the releases alternate between them (the adapter's queue takes its
// turn in the round-robin, after its pool's).
func TestQueueReleasesAdapterQueuesInTurn(t *testing.T) {
	rt := &poolsSaturated{sat: map[string]bool{}, workers: map[string]bool{"[1]": true}}
	rg := newReleasingGate(t, rt)
	rg.g.adapterWorkers = func(a string) []kvevent.WorkerID {
		if a == "x" {
			return []kvevent.WorkerID{1}
		}
		return nil
	}
	x := queueKey{adapter: "x"}
	rg.push(queueKey{}, "1")
	rg.push(queueKey{}, "2")
	rg.push(x, "x1")
	rg.push(x, "x2")
	if got, want := rg.releaseN(3), "1 2 "; got != want {
		t.Fatalf("x's worker saturated: released %q, want %q", got, want)
	}
	rt.mu.Lock()
	rt.workers["[1]"] = false
	rt.mu.Unlock()
	if got, want := rg.releaseN(2), "x1 x2"; got != want {
		t.Fatalf("x's worker with room: released %q, want %q", got, want)
	}
	for _, id := range []string{"3", "4"} {
		rg.push(queueKey{}, id)
		rg.push(x, "x"+id)
	}
	if got, want := rg.releaseN(4), "3 x3 4 x4"; got != want {
		t.Fatalf("both with room: released %q, want %q", got, want)
	}
}

// TestGateJudgesTheRequestsPool: over pools where model-b's only worker
// (2) holds a prompt over the thresholds and the default model's (1) is
// idle, the workers below the thresholds a released request may be
// narrowed to are its own pool's: none for model-b (worker 1 could not
// take it), worker 1 for the default model; and a prompt's cached
// prefix is sized in its own pool's blocks.
func TestGateJudgesTheRequestsPool(t *testing.T) {
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pools, err := router.NewPools(testModel, router.DefaultConfig(), router.NewSerial(x), time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range map[kvevent.WorkerID]struct {
		pool string
		bs   int
	}{1: {"", 16}, 2: {"model-b", 32}} {
		if err := pools.AddWorker(m.pool, router.WorkerInfo{ID: id, BlockSize: m.bs, Mode: router.Approximate, KVCapacityBlocks: 2048}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := DefaultQueueConfig()
	cfg.Thresholds = scheduler.Thresholds{ActivePrefillTokensThreshold: 10}
	g, err := newGate(cfg, pools, time.Now, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pools.Route(router.Request{ID: "b", Model: "model-b", Tokens: make([]uint32, 256)}); err != nil {
		t.Fatal(err)
	}
	if got := g.unsaturated("model-b", nil); len(got) != 0 {
		t.Fatalf("model-b's workers below the thresholds: %v, want none", got)
	}
	if got := g.unsaturated("", nil); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the default model's workers below the thresholds: %v, want [1]", got)
	}
	if g.blockSize("model-b") != 32 || g.blockSize("") != 16 {
		t.Fatalf("block sizes: model-b %d, default %d; want 32, 16", g.blockSize("model-b"), g.blockSize(""))
	}
}
