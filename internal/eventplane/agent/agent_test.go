package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/eventplane/agent"
	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/kveventtest"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// key and view are the shared naive model of held blocks.
type (
	key  = kveventtest.Key
	view = kveventtest.View
)

func truth(rec localindex.Recovery) map[key]uint64 {
	_, evs := rec.Dump()
	var v view
	for _, ev := range evs {
		ev.Worker = kvevent.WorkerRank{}
		_ = v.ApplyEvent(ev)
	}
	return v.Get(kvevent.WorkerRank{})
}

// startEngine runs a mock engine that publishes vLLM's ZMQ events (with a
// replay socket) and serves HTTP on a free port; it stops at cleanup. It
// returns the engine, its event sink and its base URL.
func startEngine(t *testing.T) (*server.Worker, *server.ZMQSink, string) {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Engine = mocker.DefaultConfig()
	cfg.Engine.BlockSize, cfg.Engine.NumGPUBlocks, cfg.Engine.SpeedupRatio, cfg.Engine.Watermark = 4, 40, 1000, 0
	cfg.Logger = quiet()
	kc := server.DefaultKVEventsConfig()
	kc.Endpoint, kc.ReplayEndpoint = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	sink, err := server.NewZMQSink(kc, server.ZMQOptions{}, 0, 1, quiet())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sinks = []server.EventSink{sink}
	eng, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = eng.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); wg.Wait(); http.DefaultClient.CloseIdleConnections() })
	return eng, sink, "http://" + ln.Addr().String()
}

// An engine (the mock worker, speaking vLLM's ZMQ format with replay) and
// an agent next to it: the router's view follows the engine's cached set
// through the agent, also across an agent restart (the new agent replays
// the engine's stream, publishes under a new publisher id, and the router
// swaps in its dump).
func TestAgentBridgesEngineToRouter(t *testing.T) {
	ns := natstest.StartServer(t, -1, false)
	conn := func() *nats.Conn { return natstest.Connect(t, ns.ClientURL()) }

	// The engine.
	eng, sink, url := startEngine(t)

	startAgent := func() (*agent.Agent, context.CancelFunc, *sync.WaitGroup) {
		ac := agent.DefaultConfig()
		ac.Record.Name, ac.Record.URL, ac.Record.BlockSize = "engine-1", url, 4
		ac.Endpoint, ac.Replay = sink.Endpoint(0), sink.ReplayEndpoint(0)
		a, err := agent.New(ac, conn(), nil, nil, quiet())
		if err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithCancel(context.Background())
		var awg sync.WaitGroup
		awg.Add(1)
		go func() { defer awg.Done(); _ = a.Run(actx) }()
		return a, acancel, &awg
	}
	a, acancel, awg := startAgent()

	v := &view{}
	cc := natsevents.DefaultConsumerConfig()
	cc.Recovery.RetryWait = 50 * time.Millisecond
	c, err := natsevents.NewConsumer(cc, conn(), v, nil, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: a.Record()}})
	w := kvevent.WorkerRank{ID: a.Record().ID}

	rng := rand.New(rand.NewPCG(7, 8))
	traffic := func(n int) {
		for range n {
			words := make([]string, 0, 30)
			p := rng.IntN(4)
			for i := range 6 + rng.IntN(20) {
				if i < 8 {
					words = append(words, fmt.Sprintf("p%d_%d", p, i))
				} else {
					words = append(words, fmt.Sprintf("x%d", rng.IntN(500)))
				}
			}
			body, _ := json.Marshal(map[string]any{"prompt": strings.Join(words, " "), "max_tokens": 2})
			resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	converged := func(what string) {
		poll.Until(t, 10*time.Second, func() bool {
			want := truth(eng.LocalIndex(0))
			return len(want) > 0 && maps.Equal(v.Get(w), want) && maps.Equal(truth(a.LocalIndex(0)), want)
		}, what)
	}
	traffic(40)
	converged("router view equals the engine's cache")

	acancel()
	awg.Wait()
	a, acancel, awg = startAgent()
	defer func() { acancel(); awg.Wait() }()
	traffic(20)
	converged("router view equals the engine's cache after an agent restart")
}

// The same bridge over the ZMQ event plane (--event-plane zmq): the agent
// publishes RouterEvents on a PUB socket, answers recovery on a ROUTER, and
// a zmqevents consumer follows it from the agent's record.
func TestAgentOverZMQ(t *testing.T) {
	eng, sink, url := startEngine(t)

	ac := agent.DefaultConfig()
	ac.Record.Name, ac.Record.URL, ac.Record.BlockSize = "engine-z", url, 4
	ac.Endpoint, ac.Replay = sink.Endpoint(0), sink.ReplayEndpoint(0)
	ac.ZMQ = zmqevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", QueryEndpoint: "tcp://127.0.0.1:0"}
	a, err := agent.New(ac, nil, nil, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(context.Background())
	var awg sync.WaitGroup
	awg.Add(1)
	go func() { defer awg.Done(); _ = a.Run(actx) }()
	defer func() { acancel(); awg.Wait() }()

	v := &view{}
	cc := zmqevents.DefaultConsumerConfig()
	cc.DialRetry, cc.Recovery.RetryWait = 20*time.Millisecond, 50*time.Millisecond
	c, err := zmqevents.NewConsumer(cc, v, nil, nil, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: a.Record()}})
	w := kvevent.WorkerRank{ID: a.Record().ID}
	for i := range 30 {
		body := fmt.Sprintf(`{"prompt":"q%d a b c d e f g h %d","max_tokens":2}`, i%3, i)
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	c.Resync()
	poll.Until(t, 10*time.Second, func() bool {
		want := truth(eng.LocalIndex(0))
		return len(want) > 0 && maps.Equal(v.Get(w), want)
	}, "router view equals the engine's cache over ZMQ")
}
