package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// The NATS event plane is exercised at the component level: mock workers
// publishing RouterEvents through natsevents publishers, routers reduced
// to natsevents consumers feeding their own concurrent index. (Until
// internal/service consumes the NATS event plane, this is the router's
// NATS path.)

// wirePublisher sits between a worker's NATS sink and its natsevents
// publisher: the events are already numbered, so what it does is exactly
// what the wire could do to them: reorder, drop, duplicate, delay.
type wirePublisher struct {
	inner *natsevents.Publisher
	stats *counters

	mu   sync.Mutex
	rng  *rand.Rand
	f    wireFaults
	held [][]kvevent.Event // batches held back to be sent after a later one
}

type wireFaults struct {
	reorder, drop, dup float64
	delay              time.Duration
}

func (p *wirePublisher) set(f wireFaults) {
	p.mu.Lock()
	p.f = f
	p.mu.Unlock()
}

func (p *wirePublisher) Publish(evs []kvevent.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f.delay > 0 {
		time.Sleep(p.f.delay) // in order; the engine's rank goroutine waits
	}
	switch r := p.rng.Float64(); {
	case r < p.f.reorder && len(p.held) < 3:
		p.held = append(p.held, evs)
		p.stats.add("nats: batches reordered", 1)
		return nil
	case r < p.f.reorder+p.f.drop:
		p.stats.add("nats: batches lost", 1)
		return p.flushHeld()
	case r < p.f.reorder+p.f.drop+p.f.dup:
		p.stats.add("nats: batches duplicated", 1)
		_ = p.inner.Publish(evs)
	}
	err := p.inner.Publish(evs)
	if ferr := p.flushHeld(); err == nil {
		err = ferr
	}
	return err
}

// flushHeld sends the held batches late, newest first.
func (p *wirePublisher) flushHeld() error {
	var err error
	for i := len(p.held) - 1; i >= 0; i-- {
		if e := p.inner.Publish(p.held[i]); e != nil && err == nil {
			err = e
		}
	}
	p.held = p.held[:0]
	return err
}

func (p *wirePublisher) Serve(w kvevent.WorkerRank, rec localindex.Recovery) error {
	return p.inner.Serve(w, rec)
}

func (p *wirePublisher) Close() error { return p.inner.Close() }

// natsRouter is a router's NATS path: a consumer feeding its own index.
type natsRouter struct {
	nc  *nats.Conn
	idx *liveindex.Index
	c   *natsevents.Consumer
}

type idxApplier struct{ x *liveindex.Index }

func (a idxApplier) ApplyEvent(ev kvevent.Event) error { return a.x.Apply(ev) }

type natsWorker struct {
	id   uint64
	url  string
	srv  *server.Worker
	wire *wirePublisher
	nc   *nats.Conn
}

type natsCluster struct {
	url     string
	port    int
	srv     *natsserver.Server
	workers []*natsWorker
	routers []*natsRouter
	log     *slog.Logger
	stats   *counters
	wg      sync.WaitGroup
}

func (c *natsCluster) startServer() error {
	o := &natsserver.Options{Host: "127.0.0.1", Port: c.port, NoLog: true, NoSigs: true}
	s, err := natsserver.NewServer(o)
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("nats server not ready")
	}
	c.srv = s
	c.port = s.Addr().(*net.TCPAddr).Port
	c.url = s.ClientURL()
	return nil
}

func (c *natsCluster) stopServer() {
	c.srv.Shutdown()
	c.srv.WaitForShutdown()
}

func (c *natsCluster) connect(onReconnect func()) (*nats.Conn, error) {
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.ReconnectBufSize(-1)}
	if onReconnect != nil {
		opts = append(opts, nats.ReconnectHandler(func(*nats.Conn) { onReconnect() }))
	}
	return nats.Connect(c.url, opts...)
}

func (c *natsCluster) startRouter() (*natsRouter, error) {
	x, err := liveindex.New(liveindex.DefaultConfig())
	if err != nil {
		return nil, err
	}
	r := &natsRouter{idx: x}
	var mu sync.Mutex
	nc, err := c.connect(func() {
		mu.Lock()
		cons := r.c
		mu.Unlock()
		if cons != nil {
			cons.Reconnected()
		}
	})
	if err != nil {
		x.Close()
		return nil, err
	}
	cfg := natsevents.DefaultConsumerConfig()
	cfg.Recovery.QueryTimeout = time.Second
	cfg.Recovery.RetryWait = 50 * time.Millisecond
	cons, err := natsevents.NewConsumer(cfg, nc, idxApplier{x}, nil, nil, c.log)
	if err == nil {
		err = cons.Start()
	}
	if err != nil {
		nc.Close()
		x.Close()
		return nil, err
	}
	mu.Lock()
	r.nc, r.c = nc, cons
	mu.Unlock()
	for _, w := range c.workers {
		cons.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: w.record()}})
	}
	return r, nil
}

func (r *natsRouter) stop() {
	_ = r.c.Close()
	r.nc.Close()
	r.idx.Close()
}

func (w *natsWorker) record() fleet.WorkerRecord {
	return fleet.WorkerRecord{ID: kvevent.WorkerID(w.id), Name: fmt.Sprint(w.id), URL: w.url, BlockSize: blockSize, DPSize: 1,
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract()}
}

func (c *natsCluster) startWorker(ctx context.Context, k int, seed uint64) error {
	nc, err := c.connect(nil)
	if err != nil {
		return err
	}
	pub, err := natsevents.NewPublisher(natsevents.DefaultPublisherConfig(), nc)
	if err != nil {
		nc.Close()
		return err
	}
	wire := &wirePublisher{inner: pub, stats: c.stats, rng: rand.New(rand.NewPCG(seed, uint64(k)))}
	cfg := server.DefaultConfig()
	cfg.Model = modelName
	cfg.Engine = mocker.DefaultConfig()
	cfg.Engine.BlockSize = blockSize
	cfg.Engine.NumGPUBlocks = 160
	cfg.Engine.SpeedupRatio = 200
	cfg.WorkerID = uint64(1000 + k)
	cfg.Logger = c.log
	sink := server.NewRouterEventSink(wire, cfg.WorkerID, 1)
	cfg.Sinks = []server.EventSink{sink}
	srv, err := server.New(cfg)
	if err == nil {
		err = sink.Serve(srv)
	}
	if err != nil {
		nc.Close()
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		nc.Close()
		return err
	}
	c.workers = append(c.workers, &natsWorker{id: cfg.WorkerID, url: "http://" + ln.Addr().String(), srv: srv, wire: wire, nc: nc})
	c.wg.Go(func() {
		_ = srv.Serve(ctx, ln)
		nc.Close()
	})
	return nil
}

// traffic sends n requests straight to random workers.
func (c *natsCluster) traffic(ctx context.Context, rng *rand.Rand, ps [][]uint32, n int) {
	var wg sync.WaitGroup
	for range n {
		w := c.workers[rng.IntN(len(c.workers))]
		p := ps[rng.IntN(len(ps))]
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": modelName, "prompt": p, "max_tokens": 2})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url+"/v1/completions", bytes.NewReader(body))
			if err != nil {
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
}

func (c *natsCluster) matches() (bool, string) {
	var want []blockKey
	for _, w := range c.workers {
		_, evs := w.srv.LocalIndex(0).Dump()
		want = append(want, keys(evs)...)
	}
	want = keys(toEvents(want))
	for i, r := range c.routers {
		if err := r.idx.Flush(); err != nil {
			return false, err.Error()
		}
		got := keys(r.idx.Dump())
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("router %d: index %s; engines %s", i, summary(got), summary(want))
		}
	}
	return true, ""
}

// runNATSSchedule runs one seeded schedule on the NATS path: NATS server
// restarts, events reordered / lost / duplicated / delayed on the wire,
// engine cache resets, router (consumer) restarts, with 1–3 routers.
func runNATSSchedule(t *testing.T, seed uint64, steps int) result {
	t.Helper()
	var res result
	ok := t.Run(fmt.Sprintf("nats/seed=%d", seed), func(t *testing.T) {
		logs := &logBuf{}
		defer func() {
			if t.Failed() {
				t.Logf("REPLAY: go test -tags chaos -race -run '^TestChaosNATS' ./internal/chaos/ -chaos.seed=%d", seed)
				t.Logf("logs (tail):\n%s", logs.tail(20000))
			}
		}()
		rng := rand.New(rand.NewPCG(seed, 3))
		c := &natsCluster{port: -1, stats: newCounters(),
			log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
		if err := c.startServer(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer func() {
			for _, r := range c.routers {
				r.stop()
			}
			cancel()
			c.wg.Wait()
			c.stopServer()
			http.DefaultClient.CloseIdleConnections()
		}()
		for k := range 2 + rng.IntN(3) {
			if err := c.startWorker(ctx, k, seed); err != nil {
				t.Fatal(err)
			}
		}
		for range 1 + rng.IntN(3) {
			r, err := c.startRouter()
			if err != nil {
				t.Fatal(err)
			}
			c.routers = append(c.routers, r)
		}
		ps := prompts(32, seed)
		for step := range steps {
			w := c.workers[rng.IntN(len(c.workers))]
			var name string
			switch rng.IntN(5) {
			case 0:
				name = "nats: server restart"
				c.stopServer()
				c.traffic(ctx, rng, ps, 5+rng.IntN(20)) // published meanwhile: lost
				if err := c.startServer(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			case 1:
				name = "nats: wire faults (reorder/loss/dup/delay)"
				w.wire.set(wireFaults{reorder: 0.3 * rng.Float64(), drop: 0.3 * rng.Float64(), dup: 0.3 * rng.Float64(),
					delay: time.Duration(rng.IntN(3)) * time.Millisecond})
			case 2:
				name = "nats: engine cache reset"
				for range 50 {
					resp, err := http.Post(w.url+"/reset_prefix_cache", "application/json", nil)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							break
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
			case 3:
				name = "nats: router restart"
				k := rng.IntN(len(c.routers))
				c.routers[k].stop()
				c.traffic(ctx, rng, ps, 5+rng.IntN(10))
				r, err := c.startRouter()
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				c.routers[k] = r
			default:
				name = "nats: wire faults off"
				w.wire.set(wireFaults{})
			}
			if name == "nats: wire faults off" {
				c.stats.add(name, 1)
			} else {
				c.stats.add("fault: "+name, 1)
			}
			c.traffic(ctx, rng, ps, 10+rng.IntN(30))
		}
		for _, w := range c.workers {
			w.wire.set(wireFaults{})
		}
		healed := time.Now()
		// A loss at the very end of a stream shows no gap: nudge with one
		// more request per worker, and after a few seconds ask every worker
		// for what was missed (what the service does on a reconnect).
		polls := 0
		poll.UntilState(t, 20*time.Second, func() (bool, string) {
			okIdx, detail := c.matches()
			if !okIdx {
				polls++
				if polls%50 == 0 {
					for _, r := range c.routers {
						r.c.Reconnected()
					}
				}
				c.traffic(ctx, rng, ps, len(c.workers))
			}
			return okIdx, detail
		}, "every router's index equals the engines' caches")
		res.convergedMS = int(time.Since(healed).Milliseconds())
		res.faults = c.stats.snapshot()
		t.Logf("nats seed %d: %d workers, %d routers; converged %d ms after heal; %v", seed, len(c.workers), len(c.routers),
			res.convergedMS, res.faults)
	})
	if !ok {
		t.Fatalf("NATS schedule failed; replay with -chaos.seed=%d", seed)
	}
	return res
}

// TestChaosNATSShort is the CI variant of the NATS-path schedules.
func TestChaosNATSShort(t *testing.T) {
	if testing.Short() {
		t.Skip("fault schedules take seconds")
	}
	var rs []result
	for _, seed := range seeds(2) {
		rs = append(rs, runNATSSchedule(t, seed, 8))
	}
	report(t, rs)
}
