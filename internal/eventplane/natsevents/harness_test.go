package natsevents_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/kveventtest"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// key and view are the shared naive model of held blocks.
type (
	key  = kveventtest.Key
	view = kveventtest.View
)

func newView() *view { return &view{} }

func truth(rec localindex.Recovery) map[key]uint64 {
	_, evs := rec.Dump()
	v := newView()
	for _, ev := range evs {
		ev.Worker = kvevent.WorkerRank{}
		_ = v.ApplyEvent(ev)
	}
	return v.Get(kvevent.WorkerRank{})
}

// fleet is a set of mock workers publishing on NATS.
type testFleet struct {
	workers []*server.Worker
	urls    []string
	ids     []uint64
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func startFleet(t *testing.T, url string, n int, faults server.Faults) *testFleet {
	t.Helper()
	return startFleetOpts(t, url, n, faults)
}

func startFleetOpts(t *testing.T, url string, n int, faults server.Faults, opts ...nats.Option) *testFleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &testFleet{cancel: cancel}
	for k := range n {
		nc := natstest.Connect(t, url, opts...)
		cfg := server.DefaultConfig()
		cfg.Engine = mocker.DefaultConfig()
		cfg.Engine.BlockSize = 4
		cfg.Engine.NumGPUBlocks = 48
		cfg.Engine.SpeedupRatio = 1000
		cfg.Engine.Watermark = 0
		cfg.WorkerID = uint64(100 + k)
		cfg.Faults = faults
		cfg.Faults.Seed = uint64(k + 1)
		cfg.Logger = quietLog()
		sink, err := server.NewNATSSink(nc, natsevents.DefaultPublisherConfig(), cfg.WorkerID, 1)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Sinks = []server.EventSink{sink}
		w, err := server.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := sink.Serve(w); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f.workers = append(f.workers, w)
		f.urls = append(f.urls, "http://"+ln.Addr().String())
		f.ids = append(f.ids, cfg.WorkerID)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			_ = w.Serve(ctx, ln)
		}()
	}
	t.Cleanup(f.stop)
	return f
}

func (f *testFleet) stop() {
	f.cancel()
	f.wg.Wait()
	http.DefaultClient.CloseIdleConnections()
}

func (f *testFleet) record(k int) fleet.WorkerRecord {
	return fleet.WorkerRecord{ID: kvevent.WorkerID(f.ids[k]), Name: fmt.Sprintf("w%d", k), URL: f.urls[k], BlockSize: 4, DPSize: 1,
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract()}
}

func (f *testFleet) announce(c *natsevents.Consumer) {
	for k := range f.workers {
		c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: f.record(k)}})
	}
}

// traffic sends n prompts drawn from a few shared prefixes to random
// workers.
func (f *testFleet) traffic(t *testing.T, rng *rand.Rand, n int) {
	t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for range n {
		k := rng.IntN(len(f.urls))
		words := make([]string, 0, 40)
		prefix := rng.IntN(6)
		for i := range 8 + rng.IntN(24) {
			if i < 12 {
				words = append(words, fmt.Sprintf("p%d_%d", prefix, i))
			} else {
				words = append(words, fmt.Sprintf("x%d", rng.IntN(1000)))
			}
		}
		body, _ := json.Marshal(map[string]any{"prompt": strings.Join(words, " "), "max_tokens": 1 + rng.IntN(6)})
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := http.Post(f.urls[k]+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
}

func (f *testFleet) reset(t *testing.T, k int) {
	resp, err := http.Post(f.urls[k]+"/reset_prefix_cache", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// converged reports whether v matches every worker's local indexer.
func (f *testFleet) converged(v *view) (bool, string) {
	for k, w := range f.workers {
		wk := kvevent.WorkerRank{ID: kvevent.WorkerID(f.ids[k])}
		want, got := truth(w.LocalIndex(0)), v.Get(wk)
		if len(want) == 0 && len(got) == 0 {
			continue
		}
		if !maps.Equal(want, got) {
			return false, fmt.Sprintf("worker %d: router holds %d blocks, engine %d", k, len(got), len(want))
		}
	}
	return true, ""
}

// waitConverged polls until v matches the fleet; after a second it
// asks for a resync (a loss at the very end of the stream shows no gap).
func waitConverged(t *testing.T, f *testFleet, v *view, c *natsevents.Consumer, d time.Duration) {
	t.Helper()
	start := time.Now()
	resynced := false
	poll.UntilState(t, d, func() (bool, string) {
		ok, why := f.converged(v)
		if !ok && !resynced && time.Since(start) > time.Second {
			c.Reconnected()
			resynced = true
		}
		return ok, why
	}, "the view to match the fleet")
}

func newConsumer(t *testing.T, nc *nats.Conn, v *view, reg *prometheus.Registry, states func(kvevent.WorkerID, fleet.State, string)) *natsevents.Consumer {
	t.Helper()
	cfg := natsevents.DefaultConsumerConfig()
	cfg.Recovery.QueryTimeout = 2 * time.Second
	cfg.Recovery.RetryWait = 50 * time.Millisecond
	c, err := natsevents.NewConsumer(cfg, nc, v, states, reg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
