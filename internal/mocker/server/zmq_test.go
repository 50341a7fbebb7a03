package server

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/prometheus/client_golang/prometheus"
)

// blockSet is what a router rebuilds from the stream: per tier, engine hash
// to local hash.
type blockSet map[kvevent.Tier]map[uint64]uint64

// collector is a vllmzmq.Handler folding events into a blockSet.
type collector struct {
	mu      sync.Mutex
	set     blockSet
	batches int
	states  []vllmzmq.State
}

func newCollector() *collector {
	return &collector{set: blockSet{kvevent.TierDevice: {}, kvevent.TierHostPinned: {}}}
}

func (c *collector) Apply(_ uint64, evs []kvevent.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches++
	for _, ev := range evs {
		m := c.set[ev.Tier]
		switch ev.Kind {
		case kvevent.Stored:
			for _, b := range ev.Blocks {
				m[b.EngineHash] = b.LocalHash
			}
		case kvevent.Removed:
			for _, h := range ev.Removed {
				delete(m, h)
			}
		case kvevent.Cleared:
			for _, t := range c.set {
				clear(t)
			}
		}
	}
}

func (c *collector) StateChanged(s vllmzmq.StateChange) {
	c.mu.Lock()
	c.states = append(c.states, s.State)
	c.mu.Unlock()
}

func (c *collector) equal(want blockSet) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range []kvevent.Tier{kvevent.TierDevice, kvevent.TierHostPinned} {
		if !maps.Equal(c.set[t], want[t]) {
			return false
		}
	}
	return true
}

// localSet is the worker's own record of rank's cache, from its local
// indexer (which tracks the engine exactly: see the localindex tests).
func localSet(w *Worker, rank int) blockSet {
	out := blockSet{kvevent.TierDevice: {}, kvevent.TierHostPinned: {}}
	_, dump := w.LocalIndex(rank).Dump()
	for _, ev := range dump {
		for _, b := range ev.Blocks {
			out[ev.Tier][b.EngineHash] = b.LocalHash
		}
	}
	return out
}

// A subscriber (the router's vLLM ZMQ client) decodes every batch the mock
// publishes and rebuilds exactly the engine's cached blocks, on both tiers,
// for both encodings and replay formats, with and without injected drops
// (repaired by replay) and duplicates (dropped by the subscriber).
func TestZMQEventsRebuildCache(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		encoding, schema, replay string
		drop, dup                float64
		delay                    time.Duration
		restartEvery             int
		dp                       int
	}{
		{name: "map", encoding: "map", dp: 2},
		{name: "array-legacy", encoding: "array", schema: "lora_name", replay: "legacy", dp: 1},
		{name: "drops-replayed", encoding: "map", drop: 0.3, dup: 0.2, dp: 1},
		{name: "delayed", encoding: "map", delay: 20 * time.Millisecond, dp: 1},
		{name: "restarts", encoding: "map", restartEvery: 7, dp: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			c.Engine.NumGPUBlocks = 24
			c.Engine.NumCPUBlocks = 10
			c.DataParallelSize = tc.dp
			c.Faults.DropEvents, c.Faults.DuplicateEvents, c.Faults.Seed = tc.drop, tc.dup, 7
			c.Faults.DelayEvents, c.Faults.RestartEventsEvery = tc.delay, tc.restartEvery
			opts, err := ParseZMQOptions(tc.encoding, tc.schema, tc.replay)
			if err != nil {
				t.Fatal(err)
			}
			ev := DefaultKVEventsConfig()
			ev.EnableKVCacheEvents, ev.Endpoint, ev.ReplayEndpoint, ev.Topic = true, "tcp://127.0.0.1:0", "tcp://127.0.0.1:0", "kv-events"
			sink, err := NewZMQSink(ev, opts, 0, tc.dp, c.Logger)
			if err != nil {
				t.Fatal(err)
			}
			c.Sinks = []EventSink{sink}
			r := start(t, c)

			reg := prometheus.NewRegistry()
			zm, err := vllmzmq.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			cols := make([]*collector, tc.dp)
			subs := make([]*vllmzmq.Subscriber, tc.dp)
			for rank := range tc.dp {
				sc := vllmzmq.DefaultSubscriberConfig()
				sc.Worker = kvevent.WorkerRank{ID: 0, Rank: kvevent.DPRank(rank)}
				sc.Endpoint, sc.ReplayEndpoint, sc.Topic = sink.Endpoint(rank), sink.ReplayEndpoint(rank), "kv-events"
				sc.BlockSize = c.Engine.BlockSize
				sc.DialRetry = 10 * time.Millisecond
				sc.Logger = slog.New(slog.DiscardHandler)
				sc.Metrics = zm
				cols[rank] = newCollector()
				s, err := vllmzmq.NewSubscriber(sc, cols[rank])
				if err != nil {
					t.Fatal(err)
				}
				subs[rank] = s
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = s.Run(ctx)
				}()
			}
			defer func() {
				cancel()
				wg.Wait()
			}()
			poll.Until(t, 10*time.Second, func() bool {
				for _, s := range subs {
					if !s.Status().Connected {
						return false
					}
				}
				return true
			}, "every subscriber connected")

			// Prompts sharing prefixes, more than the 24 blocks hold: hits,
			// evictions to the host tier and out of it.
			for i := range 30 * tc.dp {
				prompt := words(16*(1+i%5), fmt.Sprint(i%7)) + words(1+i%7, fmt.Sprint("t", i))
				code, body := post(t, r.url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1 + i%20})
				if code != 200 {
					t.Fatalf("request %d: %d %s", i, code, body)
				}
			}
			if tc.restartEvery > 0 {
				// A restarted sequence is an engine restart to the router:
				// it clears the rank (blocks still cached become invisible).
				poll.Until(t, 10*time.Second, func() bool { return metricstest.Sum(t, reg, "kvrouter_vllm_events_clears_total") > 0 }, "a counted clear")
				return
			}
			for rank := range tc.dp {
				want := localSet(r.w, rank)
				if len(want[kvevent.TierDevice]) == 0 || len(want[kvevent.TierHostPinned]) == 0 {
					t.Fatalf("rank %d: test too weak, cache %d/%d blocks", rank, len(want[0]), len(want[1]))
				}
				poll.Until(t, 10*time.Second, func() bool { return cols[rank].equal(want) }, fmt.Sprintf("rank %d's view equal to its cache", rank))
			}
			gaps, dups := metricstest.Sum(t, reg, "kvrouter_vllm_events_gaps_total"), metricstest.Sum(t, reg, "kvrouter_vllm_events_duplicates_total")
			clears := metricstest.Sum(t, reg, "kvrouter_vllm_events_clears_total")
			if clears != 0 || (tc.drop > 0) != (gaps > 0) || (tc.dup > 0 && dups == 0) {
				t.Fatalf("gaps %v, duplicates %v, clears %v", gaps, dups, clears)
			}
		})
	}
}
