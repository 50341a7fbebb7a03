package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// matchEngines sends ps through the router, then checks that /v1/query
// for every prompt equals what every engine really holds, and that some
// prompt is really cached somewhere (so the check can fail).
//
// With nudge, each failed comparison sends every engine one more request
// directly (not through the router): a batch lost at the very end of a
// stream is invisible until a later batch reveals the gap, as with vLLM.
func (r *rig) matchEngines(ps [][]uint32, nudge bool) {
	r.t.Helper()
	for _, p := range ps {
		r.complete(p, 3)
	}
	nudges := uint32(0)
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		for i, p := range ps {
			got, want := r.query(p), r.truth(p)
			if !maps.Equal(got, want) {
				if nudge {
					nudges++
					for _, w := range r.fleet.Workers {
						r.direct(w, nudgePrompt(nudges))
					}
				}
				return false, fmt.Sprintf("prompt %d: router %v, engines %v", i, got, want)
			}
		}
		return true, ""
	}, "router index equals the engines' caches")
	cached := 0
	for _, p := range ps {
		for _, n := range r.truth(p) {
			cached += n
		}
	}
	if cached == 0 {
		r.t.Fatal("no engine caches any prompt: the comparison proves nothing")
	}
}

// TestQueryMatchesEngines: mock workers publishing in both encodings (and
// both replay formats) feed the router over real ZMQ; after a request
// stream, /v1/query for every prompt equals the engines' true prefix
// state, and every worker is EXACT.
func TestQueryMatchesEngines(t *testing.T) {
	for _, tc := range []struct {
		name string
		zmq  server.ZMQOptions
	}{
		{"map-topic", mustZMQ(t, "map", "", "topic")},
		{"array-legacy", mustZMQ(t, "array", "", "legacy")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpt{workers: 3, zmq: tc.zmq})
			r.matchEngines(prompts(18, 1), false)
			for name, st := range r.workers() {
				if st[0] != "EXACT" {
					t.Errorf("worker %s is %s (%s), want EXACT", name, st[0], st[1])
				}
			}
			if r.metric("kvrouter_vllm_events_events_applied_total") == 0 || r.metric("kvrouter_index_entries") == 0 {
				t.Error("event and index metrics did not move")
			}
		})
	}
}

func mustZMQ(t *testing.T, enc, schema, replay string) server.ZMQOptions {
	t.Helper()
	o, err := server.ParseZMQOptions(enc, schema, replay)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestDroppedEventsReplayed: with batches dropped on the live stream (still
// buffered for replay), the router sees gaps, replays them, and ends with
// the engines' exact state.
func TestDroppedEventsReplayed(t *testing.T) {
	r := newRig(t, rigOpt{workers: 2, faults: server.Faults{DropEvents: 0.3, Seed: 5}})
	r.matchEngines(prompts(16, 2), true)
	if g := r.metric("kvrouter_vllm_events_gaps_total"); g == 0 {
		t.Fatal("no gap was detected: the drop fault did not fire")
	}
	if ok := r.metric("kvrouter_vllm_events_replays_total", "result", "ok"); ok == 0 {
		t.Fatal("no replay succeeded")
	}
	if c := r.metric("kvrouter_vllm_events_clears_total"); c != 0 {
		t.Fatalf("%v clears: replay should have covered every gap", c)
	}
	poll.UntilState(r.t, 5*time.Second, func() (bool, string) {
		ws := r.workers()
		for _, st := range ws {
			if st[0] != "EXACT" {
				return false, fmt.Sprint(ws)
			}
		}
		return true, ""
	}, "all workers EXACT")
}

// TestEngineRestart: an engine process restarts (same ports, empty cache,
// event sequence back at 0). The router clears that worker, marks it
// DEGRADED with the reason, and recovers to EXACT as new events arrive;
// the index then equals the new engine's cache.
func TestEngineRestart(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1})
	ps := prompts(6, 3)
	r.matchEngines(ps[:3], false)
	before := r.query(ps[0])["mock-1"]
	if before == 0 {
		t.Fatal("prompt 0 not indexed before the restart")
	}
	if err := r.fleet.Workers[0].RestartEngine(context.Background()); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		st := r.workers()["mock-1"]
		return st[0] == "DEGRADED" && strings.Contains(st[1], "restarted"), st[0] + " " + st[1]
	}, "worker DEGRADED after the restart")
	// The clear goes through the index writers: poll for it.
	poll.UntilState(r.t, 5*time.Second, func() (bool, string) {
		got := r.query(ps[0])["mock-1"]
		return got == 0, fmt.Sprintf("prompt 0 still indexed with %d blocks after the restart", got)
	}, "worker cleared after the restart")
	// New traffic after the restart: batches 1, 2, ... of the new sequence.
	r.matchEngines(ps[3:], false)
	if got := r.query(ps[0])["mock-1"]; got != r.truth(ps[0])["mock-1"] {
		t.Fatalf("prompt 0 after restart: router %d, engine %d", got, r.truth(ps[0])["mock-1"])
	}
	if r.metric("kvrouter_vllm_events_clears_total") == 0 {
		t.Fatal("the restart did not clear the worker")
	}
	if !strings.Contains(r.logs.String(), "to=DEGRADED") {
		t.Fatalf("no DEGRADED transition was logged")
	}
	poll.UntilState(r.t, 5*time.Second, func() (bool, string) {
		st := r.workers()["mock-1"]
		return st[0] == "EXACT", st[0] + " " + st[1]
	}, "worker EXACT")
}

// TestBlockSizeMismatchRefused: a worker declaring another block size is
// refused loudly: REFUSED state with the reason, a counter, a warning; it
// is never routed to, and the others are.
func TestBlockSizeMismatchRefused(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1, cfg: func(c *config.Config) {
		c.Workers = append(c.Workers, fleet.StaticWorker{Name: "big-blocks", URL: "http://127.0.0.1:1",
			Events: "tcp://127.0.0.1:1", BlockSize: 32})
	}})
	st := r.workers()["big-blocks"]
	if st[0] != "REFUSED" || !strings.Contains(st[1], "block size 32 ≠ 16") {
		t.Fatalf("big-blocks is %v, want REFUSED (block size 32 ≠ 16)", st)
	}
	if n := r.metric("kvrouter_discovery_workers_refused_total", "reason", "block_size"); n != 1 {
		t.Fatalf("refused counter %v, want 1", n)
	}
	if n := r.metric("kvrouter_worker_state", "worker", "big-blocks", "state", "REFUSED"); n != 1 {
		t.Fatalf("kvrouter_worker_state{REFUSED} = %v, want 1", n)
	}
	// The directory's own series, read at scrape time from Directory.Stats.
	if n := r.metric("kvrouter_discovery_workers", "state", "REFUSED"); n != 1 {
		t.Fatalf("kvrouter_discovery_workers{REFUSED} = %v, want 1", n)
	}
	if n := r.metric("kvrouter_discovery_workers"); n != 2 {
		t.Fatalf("kvrouter_discovery_workers summed over states = %v, want 2 (one worker each)", n)
	}
	if !strings.Contains(r.logs.String(), "REFUSED") {
		t.Fatal("no warning logged")
	}
	for _, p := range prompts(4, 9) {
		if w := r.complete(p, 2); w != "mock-1" {
			t.Fatalf("request served by %q", w)
		}
	}
}

// direct sends a completion straight to a mock worker, bypassing the
// router.
func (r *rig) direct(w *FleetWorker, tokens []uint32) {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": tokens, "max_tokens": 1})
	resp, err := r.client.Post(w.URL+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		r.t.Fatalf("direct completion to %s: %v", w.Name, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("direct completion to %s: %d %s", w.Name, resp.StatusCode, body)
	}
}

// nudgePrompt is a one-block prompt no test prompt shares.
func nudgePrompt(n uint32) []uint32 {
	p := make([]uint32, blockSize+1)
	for i := range p {
		p[i] = 120000 + n*32 + uint32(i)
	}
	return p
}
