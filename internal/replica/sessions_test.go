package replica

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestBindingRoundTrip(t *testing.T) {
	b := Binding{RouterID: 7, Session: "conv-1", Worker: kvevent.WorkerRank{ID: 42, Rank: 3}}
	p, err := AppendBinding(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBinding(p)
	if err != nil || got != b {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	// Named fields: a longer map with unknown keys decodes too.
	longer, _ := msgpack.Marshal(map[string]any{"router_id": 7, "session_id": "conv-1", "ttl_secs": 300,
		"worker": map[string]any{"worker_id": 42, "dp_rank": 3, "extra": []int{1}}})
	if got, err := DecodeBinding(longer); err != nil || got != b {
		t.Fatalf("longer map: %+v, %v", got, err)
	}
	for name, v := range map[string]any{
		"no session":   map[string]any{"router_id": 7, "worker": map[string]any{"worker_id": 1}},
		"long session": map[string]any{"router_id": 7, "session_id": strings.Repeat("s", MaxSessionID+1), "worker": map[string]any{"worker_id": 1}},
		"no router":    map[string]any{"session_id": "s", "worker": map[string]any{"worker_id": 1}},
		"no worker":    map[string]any{"router_id": 7, "session_id": "s"},
		"not a map":    []int{1, 2},
	} {
		p, _ := msgpack.Marshal(v)
		if _, err := DecodeBinding(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func FuzzDecodeBinding(f *testing.F) {
	p, _ := AppendBinding(nil, Binding{RouterID: 1, Session: "s", Worker: kvevent.WorkerRank{ID: 2}})
	f.Add(p)
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		b, err := DecodeBinding(p)
		if err != nil {
			return
		}
		if b.Session == "" || len(b.Session) > MaxSessionID {
			t.Fatalf("accepted session %q", b.Session)
		}
		q, err := AppendBinding(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := DecodeBinding(q); err != nil || c != b {
			t.Fatalf("re-encoding %+v: %+v, %v", b, c, err)
		}
	})
}

// learned records the bindings a Sessions hands to Learn.
type learned struct {
	mu sync.Mutex
	m  map[string]kvevent.WorkerRank
}

func (l *learned) learn(s string, w kvevent.WorkerRank) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.m[s]; ok {
		return false
	}
	l.m[s] = w
	return true
}

func (l *learned) get(s string) (kvevent.WorkerRank, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w, ok := l.m[s]
	return w, ok
}

// TestSessionsShared: two routers on one NATS server; a binding shared
// by one reaches the other; one from a router that is not a live replica
// is refused, and a router's own bindings are not applied to itself.
func TestSessionsShared(t *testing.T) {
	url := server(t)
	regs := map[uint64]*prometheus.Registry{}
	start := func(id uint64, members ...uint64) (*Sessions, *learned) {
		regs[id] = prometheus.NewRegistry()
		c := natsbus.DefaultConfig()
		c.URL = url
		bus, err := natsbus.Start(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { bus.Shutdown(); bus.WaitForShutdown() })
		l := &learned{m: map[string]kvevent.WorkerRank{}}
		s, err := NewSessions(SessionsConfig{Namespace: "ns", Component: "router", RouterID: id, Learn: l.learn,
			Member: func(p uint64) bool {
				for _, m := range members {
					if m == p {
						return true
					}
				}
				return false
			}, Registry: regs[id]}, bus, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		if err := bus.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, l
	}
	a, la := start(1, 2)
	b, lb := start(2, 1)
	stranger, _ := start(3)
	w := kvevent.WorkerRank{ID: 9, Rank: 1}
	a.Share("conv", w)
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		got, ok := lb.get("conv")
		return ok && got == w, "b has not learned a's binding"
	}, "b learned conv")
	stranger.Share("evil", w)
	b.Share("mine", w) // reaches a: with the refusals counted, a positive signal that the stranger's arrived
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		_, ok := la.get("mine")
		return ok && a.Stats().Refused == 1 && b.Stats().Refused == 1, "a has not learned b's binding, or not refused the stranger's"
	}, "a learned b's binding and both refused the stranger's")
	if _, ok := la.get("evil"); ok {
		t.Fatal("a learned a binding from a router that is not a live replica")
	}
	if _, ok := la.get("conv"); ok {
		t.Fatal("a applied its own binding to itself")
	}
	if s := a.Stats(); s.Published != 1 || s.Learned != 1 {
		t.Fatalf("a: %+v", s)
	}
	b.Share("mine", kvevent.WorkerRank{ID: 4}) // a has it bound: first binding wins
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		return a.Stats().Known == 1, "a has not received b's second binding of mine"
	}, "a kept its binding of mine")
	if got, _ := la.get("mine"); got != w {
		t.Fatalf("a rebound mine to %v: the first binding must win", got)
	}
	// The metrics say what Stats says.
	for _, c := range []struct {
		id             uint64
		family, result string
		want           float64
	}{
		{1, "kvrouter_replica_session_bindings_sent_total", "published", 1},
		{1, "kvrouter_replica_session_bindings_sent_total", "dropped", 0},
		{1, "kvrouter_replica_session_bindings_received_total", "learned", 1},
		{1, "kvrouter_replica_session_bindings_received_total", "known", 1},
		{1, "kvrouter_replica_session_bindings_received_total", "refused", 1},
		{1, "kvrouter_replica_session_bindings_received_total", "malformed", 0},
		{2, "kvrouter_replica_session_bindings_sent_total", "published", 2},
		{2, "kvrouter_replica_session_bindings_received_total", "learned", 1},
	} {
		if got := metricstest.Sum(t, regs[c.id], c.family, "result", c.result); got != c.want {
			t.Errorf("router %d %s{result=%q} = %v, want %v", c.id, c.family, c.result, got, c.want)
		}
	}
}
