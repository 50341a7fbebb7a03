package frontend

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
)

// adapterModels is testModels with LoRA adapters of the default model,
// each loaded on the workers loaded lists.
type adapterModels struct {
	testModels
	loaded map[string][]kvevent.WorkerID
}

func (m adapterModels) Adapter(name string) (string, []kvevent.WorkerID, bool) {
	l, ok := m.loaded[name]
	return "", l, ok
}

func (m adapterModels) Adapters() []string { return slices.Sorted(maps.Keys(m.loaded)) }

// testAdapter is the LoRA adapter of newAdapterFleet, loaded on w1 only.
const testAdapter = "lora-x"

// newAdapterFleet is a front door with the queue on (saturating) over
// one pool of the default model: worker 1 (w1) has testAdapter loaded,
// worker 2 (w2) has none; both at speedup 1, so that a long stream holds
// either.
func newAdapterFleet(t *testing.T) *modelFleet {
	t.Helper()
	return newPoolsFleet(t, saturating(nil), map[uint64]poolWorker{1: {"", testModel, 1, []string{testAdapter}}, 2: {"", testModel, 1, nil}},
		func(pools *router.Pools) Models {
			return adapterModels{testModels: testModels{pools: pools}, loaded: map[string][]kvevent.WorkerID{testAdapter: {1}}}
		})
}

// answer is a completion's status and the worker that served it.
type answer struct {
	status int
	worker string
}

// sendAdapter sends a short completion for testAdapter as tenant a and
// returns where its answer will come.
func (mf *modelFleet) sendAdapter(seed int) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		resp, _ := mf.do("POST", "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":4}`, testAdapter, words(seed, 60)), "X-Tenant-ID", "a")
		got <- answer{resp.StatusCode, resp.Header.Get(HeaderWorker)}
	}()
	return got
}

// adapterWaits fails unless the adapter's request is still the one
// waiting request, in its adapter's queue, and none was released.
func (mf *modelFleet) adapterWaits(when string) {
	mf.t.Helper()
	keys, waiting, waiters, _ := mf.gateState()
	if waiting != 1 || waiters != 1 || !slices.Contains(keys, queueKey{adapter: testAdapter}) ||
		mf.metric("kvrouter_queue_requests_total", "outcome", "released") != 0 {
		mf.t.Fatalf("%s: queues %v, %d waiting, %d waiters, %v released; want the adapter's request still waiting in its queue", when, keys,
			waiting, waiters, mf.metric("kvrouter_queue_requests_total", "outcome", "released"))
	}
}

// nothingLeft polls until the gate has only its default queue, nothing
// waiting, no tenant in flight, and no request booked.
func (mf *modelFleet) nothingLeft() {
	mf.t.Helper()
	poll.UntilState(mf.t, 5*time.Second, func() (bool, string) {
		keys, waiting, waiters, ledger := mf.gateState()
		booked := mf.running(1) + mf.running(2)
		return len(keys) == 1 && waiting == 0 && waiters == 0 && len(ledger) == 0 && booked == 0,
			fmt.Sprintf("queues %v, %d waiting, %d waiters, in flight %v, %d booked", keys, waiting, waiters, ledger, booked)
	}, "nothing left of the gate")
}

// TestQueueAdapterWaitsForItsWorkers: one pool of two workers, only w1
// with adapter lora-x loaded. A long lora-x stream saturates w1 while w2
// is idle (the pool has room: it is not saturated). A second lora-x
// request then waits in the queue (depth 1, "queued", the status page
// listing it as the model's adapter queue) instead of bypassing onto the
// saturated w1, while a base-model request bypasses and is served by
// w2. That request ending (w2 free again) and a kick release nothing:
// the adapter's request waits for w1. Once the stream ends, it is
// released and served by w1, and nothing of the gate is left (tenant a's
// in-flight count back to 0, the adapter's queue dropped).
func TestQueueAdapterWaitsForItsWorkers(t *testing.T) {
	mf := newAdapterFleet(t)
	stopBlocker, blocked := mf.startStreamBody(fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":20000,"stream":true}`, testAdapter, words(1, 60)),
		"X-Tenant-ID", "a")
	defer stopBlocker()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(1) == 1, fmt.Sprintf("%d running on w1", mf.running(1))
	}, "the adapter's blocker running on w1")
	th := mf.f.cfg.Queue.Thresholds
	if !mf.pools.WorkersSaturated("", th, []kvevent.WorkerID{1}) || mf.pools.PoolSaturated("", th) {
		t.Fatal("the blocker did not saturate w1 alone")
	}

	got := mf.sendAdapter(2)
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.queueDepth() == 1, fmt.Sprintf("depth %v", mf.queueDepth())
	}, "the adapter's second request queued")
	if q := mf.metric("kvrouter_queue_requests_total", "outcome", "queued"); q != 1 {
		t.Fatalf("queued %v, want 1", q)
	}
	if q, sb := mf.statusQueue(); q == nil || q.Waiting != 1 ||
		!slices.Equal(q.Models, []queueModelJSON{{Model: testModel, Adapter: testAdapter, Waiting: 1}}) {
		t.Fatalf("status JSON queue: %s", sb)
	}

	resp, body := mf.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, words(3, 60)), "X-Tenant-ID", "b")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderWorker) != "w2" {
		t.Fatalf("base-model request: %d on %q: %s; want 200 on w2", resp.StatusCode, resp.Header.Get(HeaderWorker), body)
	}
	if b := mf.metric("kvrouter_queue_requests_total", "outcome", "bypassed"); b != 2 {
		t.Fatalf("bypassed %v, want 2 (the adapter's blocker and the base-model request)", b)
	}
	// The base-model request has ended once tenant b is not in flight
	// and w2 has nothing booked; kick again with w2 free: the adapter's
	// request must still wait.
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		_, _, _, ledger := mf.gateState()
		return ledger["b"] == 0 && mf.running(2) == 0, fmt.Sprintf("in flight %v, %d running on w2", ledger, mf.running(2))
	}, "the base-model request ended")
	mf.f.gate.kick()
	mf.adapterWaits("after w2 freed")

	stopBlocker()
	<-blocked
	if a := <-got; a.status != http.StatusOK || a.worker != "w1" {
		t.Fatalf("the adapter's queued request: %d on %q, want 200 on w1", a.status, a.worker)
	}
	if r := mf.metric("kvrouter_queue_requests_total", "outcome", "released"); r != 1 {
		t.Fatalf("released %v, want 1", r)
	}
	mf.nothingLeft()
}

// TestQueueAdapterNotReleasedByOtherWorkers: w1 (lora-x loaded) and w2
// (none) each held by a long stream, the adapter's and a base-model one:
// the whole pool is saturated, and a second lora-x request waits. Then
// w2's stream ends: the pool has room again (a base-model request
// bypasses and is served by w2, the positive sign), yet the adapter's
// request is not released onto the still saturated w1, however the
// queue is kicked. Once w1's stream ends it is released and served by
// w1, and nothing of the gate is left.
func TestQueueAdapterNotReleasedByOtherWorkers(t *testing.T) {
	mf := newAdapterFleet(t)
	stopA, blockedA := mf.startStreamBody(fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":20000,"stream":true}`, testAdapter, words(1, 60)),
		"X-Tenant-ID", "a")
	defer stopA()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(1) == 1, fmt.Sprintf("%d running on w1", mf.running(1))
	}, "the adapter's blocker running on w1")
	stopB, blockedB := mf.startStream(words(2, 60), 20000, "X-Tenant-ID", "b")
	defer stopB()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(2) == 1, fmt.Sprintf("%d running on w1, %d on w2", mf.running(1), mf.running(2))
	}, "the base-model blocker running on w2")
	if !mf.pools.PoolSaturated("", mf.f.cfg.Queue.Thresholds) {
		t.Fatal("the blockers did not saturate the pool")
	}

	got := mf.sendAdapter(3)
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.queueDepth() == 1, fmt.Sprintf("depth %v", mf.queueDepth())
	}, "the adapter's second request queued")

	stopB()
	<-blockedB
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return mf.running(2) == 0, fmt.Sprintf("%d running on w2", mf.running(2))
	}, "w2's blocker freed")
	resp, body := mf.do("POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, words(4, 60)), "X-Tenant-ID", "b")
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderWorker) != "w2" {
		t.Fatalf("base-model request after w2 freed: %d on %q: %s; want 200 on w2", resp.StatusCode, resp.Header.Get(HeaderWorker), body)
	}
	mf.f.gate.kick()
	mf.adapterWaits("after w2 freed")

	stopA()
	<-blockedA
	if a := <-got; a.status != http.StatusOK || a.worker != "w1" {
		t.Fatalf("the adapter's queued request: %d on %q, want 200 on w1", a.status, a.worker)
	}
	if r := mf.metric("kvrouter_queue_requests_total", "outcome", "released"); r != 1 {
		t.Fatalf("released %v, want 1", r)
	}
	mf.nothingLeft()
}
