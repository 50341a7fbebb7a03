package service

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-zeromq/zmq4 v0.17.0: a closed PUB socket's writer goroutine
		// stays parked on a condition variable Close never signals (the mock
		// workers' publishers; see internal/eventplane/vllmzmq). Not ours.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
		// nats.go v1.55.0: an Object Store Put (the durable plane's
		// snapshots) can leave resetPendingAcksOnReconnect waiting on a
		// nil channel (see internal/eventplane/durable's TestMain); seen
		// once in this package's run at load 13. Not ours.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	)
}

const blockSize = 16

// rig is a router service over a mock fleet, both on loopback ports.
type rig struct {
	t      *testing.T
	fleet  *Fleet
	svc    *Service
	url    string
	logs   *logtest.Buffer
	client *http.Client
	stop   func() error
}

type rigOpt struct {
	workers  int
	zmq      server.ZMQOptions
	faults   server.Faults
	noReplay bool
	// plane is the fleet's: "" (engines' vLLM ZMQ streams, static),
	// config.PlaneNATS (RouterEvents on the router's embedded NATS,
	// registered) or config.PlaneZMQ (RouterEvents over ZMQ, static, the
	// router on --event-plane zmq).
	plane string
	cfg   func(*config.Config)
	// prefill and decode of the workers are disaggregated (pd_test.go),
	// speaking pdProtocol.
	prefill, decode int
	pdProtocol      string
	// models, when set, makes a mixed fleet (FleetConfig.Models).
	models []FleetModel
}

func newRig(t *testing.T, o rigOpt) *rig {
	t.Helper()
	if o.workers == 0 {
		o.workers = 2
	}
	model, err := LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	fc := DefaultFleetConfig()
	fc.Workers = o.workers
	fc.Engine.BlockSize = blockSize
	fc.Engine.NumGPUBlocks = 4096
	fc.Engine.SpeedupRatio = 1000
	fc.Tokenizer = model.Tokenizer
	fc.ZMQ = o.zmq
	fc.NoReplay = o.noReplay
	fc.Faults = o.faults
	fc.Logger = log.With("side", "mock")
	fc.Plane = o.plane
	fc.PrefillWorkers, fc.DecodeWorkers, fc.PDProtocol = o.prefill, o.decode, o.pdProtocol
	fc.Models = o.models
	cfg := config.Default()
	// The default event plane (embedded NATS, on a free port): the engines'
	// own ZMQ streams are read under it as under --event-plane none.
	cfg.EventPlane.NATS.Port = -1
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.Router.Seed = 1
	cfg.Events.HealthInterval = 50 * time.Millisecond
	cfg.Events.HealthTimeout = time.Second
	cfg.Events.DialRetry = 20 * time.Millisecond
	cfg.Frontend.ShutdownTimeout = 5 * time.Second
	if o.plane == config.PlaneZMQ {
		cfg.EventPlane.Kind = config.PlaneZMQ
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	fc.Registry = cfg.EventPlane.Registry // one bucket, one TTL
	var fleet *Fleet
	var svc *Service
	startFleet := func() {
		if fleet, err = StartFleet(fc); err != nil {
			if svc != nil {
				svc.Close()
			}
			t.Fatal(err)
		}
	}
	if o.plane != config.PlaneNATS {
		startFleet()
		cfg.Workers = append(fleet.Static(), cfg.Workers...)
	}
	svc, err = New(cfg, Options{Logger: log.With("side", "router"), Registry: prometheus.NewRegistry()})
	if err != nil {
		if fleet != nil {
			fleet.Stop()
		}
		t.Fatal(err)
	}
	if o.plane == config.PlaneNATS {
		// The workers register in the router's NATS (embedded, or an
		// external one connected to first, as `kvrouter up` does).
		if err := svc.ConnectNATS(context.Background()); err != nil {
			svc.Close()
			t.Fatal(err)
		}
		fc.Bus = svc.Bus()
		startFleet()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		fleet.Stop()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, ln) }()
	r := &rig{t: t, fleet: fleet, svc: svc, url: "http://" + ln.Addr().String(), logs: logs,
		client: &http.Client{Timeout: 30 * time.Second}}
	var once sync.Once
	var runErr error
	r.stop = func() error {
		once.Do(func() {
			if o.plane == config.PlaneNATS {
				r.fleet.Stop() // deregisters while the bus is up
			}
			cancel()
			runErr = <-done
			r.fleet.Stop()
			r.client.CloseIdleConnections()
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("Run returned %v", err)
		}
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	})
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		code, body := r.get("/ready")
		return code == http.StatusOK, body
	}, "router ready")
	return r
}

func (r *rig) get(path string) (int, string) {
	r.t.Helper()
	resp, err := r.client.Get(r.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a JSON body and returns the response with its body read.
func (r *rig) post(path string, body any) (*http.Response, string) {
	r.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.client.Post(r.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		r.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp, string(rb)
}

// complete sends a non-streaming token-id completion and checks it worked;
// it returns the worker that served it.
func (r *rig) complete(tokens []uint32, maxTokens int) string {
	r.t.Helper()
	resp, body := r.post("/v1/completions", map[string]any{"model": "Qwen/Qwen3-0.6B", "prompt": tokens, "max_tokens": maxTokens})
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	return resp.Header.Get("X-Kvrouter-Worker")
}

type queryResp struct {
	BlockSize int `json:"block_size"`
	Blocks    int `json:"blocks"`
	Workers   []struct {
		Worker        string `json:"worker"`
		WorkerID      uint64 `json:"worker_id"`
		DPRank        uint32 `json:"dp_rank"`
		OverlapBlocks int    `json:"overlap_blocks"`
		State         string `json:"state"`
	} `json:"workers"`
}

// query asks /v1/query for every worker's overlap with tokens, by name.
func (r *rig) query(tokens []uint32) map[string]int {
	r.t.Helper()
	resp, body := r.post("/v1/query", map[string]any{"model": "Qwen/Qwen3-0.6B", "tokens": tokens})
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("query: %d %s", resp.StatusCode, body)
	}
	var q queryResp
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		r.t.Fatalf("query body %q: %v", body, err)
	}
	out := map[string]int{}
	for _, w := range q.Workers {
		out[w.Worker] = w.OverlapBlocks
	}
	return out
}

// truth is what each engine really holds of tokens: its local indexer's
// blocks, replayed into a fresh index, queried the same way.
func (r *rig) truth(tokens []uint32) map[string]int {
	r.t.Helper()
	local, err := kvhash.LocalHashes(tokens, kvhash.Options{BlockSize: blockSize}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int{}
	for _, w := range r.fleet.Workers {
		x, err := index.New(index.DefaultConfig())
		if err != nil {
			r.t.Fatal(err)
		}
		_, evs := w.Worker.LocalIndex(0).Dump()
		for i := range evs {
			if err := x.Apply(&evs[i]); err != nil {
				r.t.Fatalf("engine dump of %s does not apply: %v", w.Name, err)
			}
		}
		var sc index.Scores
		x.Query(local, &sc)
		for _, s := range sc.List {
			out[w.Name] += int(s.Blocks)
		}
		out[w.Name] += 0
	}
	return out
}

// workers returns /v1/workers' state and reason by name.
func (r *rig) workers() map[string][2]string {
	r.t.Helper()
	code, body := r.get("/v1/workers")
	if code != http.StatusOK {
		r.t.Fatalf("/v1/workers: %d %s", code, body)
	}
	var v struct {
		Workers []struct {
			Worker string `json:"worker"`
			State  string `json:"state"`
			Reason string `json:"reason"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		r.t.Fatalf("/v1/workers body %q: %v", body, err)
	}
	out := map[string][2]string{}
	for _, w := range v.Workers {
		out[w.Worker] = [2]string{w.State, w.Reason}
	}
	return out
}

// metric sums the series of family name carrying the given label pairs.
func (r *rig) metric(name string, labels ...string) float64 {
	r.t.Helper()
	return metricstest.Sum(r.t, r.svc.Registry(), name, labels...)
}

// noBookings checks that the router holds no request on any worker.
func (r *rig) noBookings() (bool, string) {
	var busy []string
	for _, l := range r.svc.Pools().Loads() {
		if l.ActiveRequests != 0 {
			busy = append(busy, l.Worker.String())
		}
	}
	return len(busy) == 0, "requests still booked on " + strings.Join(busy, ", ")
}

// prompts builds n token-id prompts over a few shared prefixes, so that
// workers end up holding different, overlapping prefixes.
func prompts(n int, seed uint32) [][]uint32 {
	x := seed*2654435761 + 1
	rnd := func() uint32 { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return 1000 + x%100000 }
	var prefixes [][]uint32
	for range 3 {
		p := make([]uint32, 3*blockSize+5)
		for i := range p {
			p[i] = rnd()
		}
		prefixes = append(prefixes, p)
	}
	out := make([][]uint32, n)
	for i := range out {
		p := append([]uint32(nil), prefixes[i%len(prefixes)]...)
		for range 2*blockSize + int(rnd()%40) {
			p = append(p, rnd())
		}
		out[i] = p
	}
	return out
}

var _ = kvevent.TierDevice

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// secondRouter starts another router service beside r: the same config,
// fleet and NATS (r's embedded server), its own data dir and registry,
// router id id (0: a random one). stop ends it, reporting a Run error;
// calling it again does nothing.
func (r *rig) secondRouter(id uint64) (r2 *rig, stop func()) {
	t := r.t
	t.Helper()
	cfg := r.svc.cfg
	cfg.DataDir = t.TempDir()
	cfg.EventPlane.NATS.URL = r.svc.Bus().ClientURL()
	cfg.Router.ID = id
	svc2, err := New(cfg, Options{Logger: discardLog(), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc2.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc2.Run(ctx, ln) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second router: %v", err)
		}
	})
	return &rig{t: t, fleet: r.fleet, svc: svc2, url: "http://" + ln.Addr().String(), logs: r.logs, client: r.client}, stop
}
