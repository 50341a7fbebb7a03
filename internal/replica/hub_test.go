package replica

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/router"
)

// hub is an in-process stand-in for the NATS subject: every emitted event
// is encoded with the wire codec and held until flush delivers it to every
// core (the sender ignores its own), so a test decides what "the same
// instant" means.
type hub struct {
	t       testing.TB
	mu      sync.Mutex
	pending [][]byte
	cores   []*Core
	// drop, when set, loses the events it returns true for (an outage).
	drop func(ev Event) bool
	// resyncs lists, per delivery that asked for one, "receiver<-sender".
	resyncs []string
}

func (h *hub) emit(ev Event) {
	b, err := AppendEvent(nil, ev)
	if err != nil {
		h.t.Errorf("encoding %+v: %v", ev, err)
		return
	}
	h.mu.Lock()
	h.pending = append(h.pending, b)
	h.mu.Unlock()
}

func (h *hub) flush() {
	h.mu.Lock()
	p := h.pending
	h.pending = nil
	h.mu.Unlock()
	for _, b := range p {
		ev, err := DecodeEvent(b)
		if err != nil {
			h.t.Fatalf("decoding: %v", err)
		}
		if h.drop != nil && h.drop(ev) {
			continue
		}
		for _, c := range h.cores {
			if c.Receive(ev) {
				h.resyncs = append(h.resyncs, fmt.Sprintf("%d<-%d", c.RouterID(), ev.RouterID))
			}
		}
	}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable fake clock shared by a test's routers.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func newTestRouter(t testing.TB, id uint64, workers int, clk func() time.Time) *router.Router {
	t.Helper()
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := router.DefaultConfig()
	cfg.RouterID = id
	cfg.Seed = id
	r, err := router.New(cfg, router.NewSerial(x), clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	for w := 1; w <= workers; w++ {
		if err := r.AddWorker(router.WorkerInfo{ID: kvevent.WorkerID(w), BlockSize: cfg.BlockSize}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// prompt returns n tokens whose first shared come from family's stream.
func prompt(family, id, shared, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		if i < shared {
			out[i] = uint32(family*1_000_003 + i)
		} else {
			out[i] = uint32(family*1_000_003+id*7919+i) ^ 0x5bd1e995
		}
	}
	return out
}

// storedEvent is the KV event of worker w storing all full blocks of toks.
func storedEvent(t testing.TB, w kvevent.WorkerID, toks []uint32, bs int) kvevent.Event {
	t.Helper()
	local, seq, err := kvhash.Hashes(toks, kvhash.Options{BlockSize: bs}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ev := kvevent.Event{Worker: kvevent.WorkerRank{ID: w}, Kind: kvevent.Stored}
	for i := range local {
		ev.Blocks = append(ev.Blocks, kvevent.Block{EngineHash: seq[i] ^ 0xabc, LocalHash: local[i]})
	}
	return ev
}

// zeroLoad fails unless r has no booking anywhere.
func loadSum(r *router.Router) (reqs, prefill int) {
	for _, l := range r.Loads() {
		reqs += l.ActiveRequests
		prefill += l.ActivePrefillTokens
	}
	return reqs, prefill
}
