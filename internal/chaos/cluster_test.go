package chaos

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/registry"
	"github.com/kvrouter/kvrouter/internal/service"
)

const (
	blockSize = 16
	modelName = "Qwen/Qwen3-0.6B"
)

// logBuf is a goroutine-safe, bounded log sink: the tail is printed when
// a schedule fails.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 8<<20 {
		l.b.Next(4 << 20)
	}
	return l.b.Write(p)
}

func (l *logBuf) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// clusterConfig sizes a cluster.
type clusterConfig struct {
	workers, routers int
	kvBlocks         int
	dataDir          string
	seed             uint64
	// nats runs the NATS event plane: workers publish RouterEvents and
	// register (TTL heartbeat) on a NATS server the schedule can restart;
	// routers discover them there. Otherwise routers read the engines'
	// own ZMQ streams of static workers.
	nats bool
	// durable and replicaSync are the routers' --durable-kv-events and
	// --router-replica-sync (nats only).
	durable, replicaSync bool
	// natsCluster, when set, is the NATS the nats plane runs on instead of
	// a single server of its own: every process is given all its nodes'
	// URLs, and every JetStream asset is created with one replica per node.
	natsCluster *natstest.Cluster
	// ttl is the workers' registration TTL on the NATS plane; 0 means
	// registryTTL.
	ttl time.Duration
	// pd, when set, disaggregates the fleet (pd_test.go): the first
	// pd.prefill workers are prefill-role mockers, the rest decode-role.
	pd *pdConfig
}

// registryTTL is the workers' registration TTL on the NATS plane unless
// a schedule sets another (clusterConfig.ttl).
const registryTTL = time.Second

// ttl is the workers' registration TTL of this cluster.
func (c *cluster) ttl() time.Duration {
	if c.cfg.ttl > 0 {
		return c.cfg.ttl
	}
	return registryTTL
}

// cluster is a fleet of mock workers (each behind a proxy, each with a
// faulty event sink) and 1–3 routers, all on loopback.
type cluster struct {
	cfg     clusterConfig
	log     *slog.Logger
	logs    *logBuf
	stats   *counters
	tok     server.Tokenizer
	workers []*worker
	routers []*routerProc
	bus     *natsServer // nats plane only
	nc      *nats.Conn  // nats plane only: the suite's own view of the registry
	// removals records the routers' worker removals (from their logs).
	removals *removalTap

	mu sync.Mutex
	// expiries are the registrations that certainly expired so far.
	expiries []expiry
	// abandoned holds, per worker name, when a registration of it was
	// abandoned (a crash, stopped heartbeats): its process will not bring
	// that registration back.
	abandoned map[string][]time.Time
}

// worker is one mock vLLM worker process that can crash and come back on
// the same ports (HTTP behind its proxy, ZMQ PUB and replay endpoints).
type worker struct {
	c              *cluster
	k              int
	name           string
	id             uint64
	proxy          *proxy
	events, replay string

	mu     sync.Mutex
	srv    *server.Worker
	sink   *faultySink
	nc     *nats.Conn                          // nats plane
	lease  *registry.Lease[fleet.WorkerRecord] // nats plane
	faults eventFaults
	cancel context.CancelFunc
	done   chan error
	url    string // the worker's own address (not the proxy's)
	gen    int
}

// routerProc is one router process that can be stopped and started again
// on the same address.
type routerProc struct {
	c    *cluster
	k    int
	addr string

	mu     sync.Mutex
	svc    *service.Service
	reg    *prometheus.Registry // the running process's metrics
	cancel context.CancelFunc
	done   chan error
	exited atomic.Bool // Run returned without being stopped
	// gen counts the router's starts (a new process each time).
	gen atomic.Uint64
	// starting records when the router's listener was open but Run was
	// not serving on it yet.
	starting windows
}

func newCluster(cc clusterConfig, logs *logBuf, stats *counters) (*cluster, error) {
	model, err := service.LoadModel("")
	if err != nil {
		return nil, err
	}
	tap := newRemovalTap()
	log := slog.New(&tapHandler{inner: slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}), tap: tap})
	c := &cluster{cfg: cc, log: log, logs: logs, stats: stats, tok: model.Tokenizer, removals: tap}
	ok := false
	defer func() {
		if !ok {
			c.close()
		}
	}()
	if cc.nats {
		if cc.natsCluster == nil {
			if c.bus, err = startNATS(filepath.Join(cc.dataDir, "nats-server")); err != nil {
				return nil, err
			}
		}
		if c.nc, err = nats.Connect(c.natsURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)); err != nil {
			return nil, err
		}
	}
	for k := range cc.workers {
		w := &worker{c: c, k: k, name: fmt.Sprintf("mock-%d", k+1), events: "tcp://127.0.0.1:0", replay: "tcp://127.0.0.1:0"}
		w.id = uint64(fleet.DeriveID(w.name))
		if w.proxy, err = newProxy("127.0.0.1:1"); err != nil {
			return nil, err
		}
		c.workers = append(c.workers, w)
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	for k := range cc.routers {
		r := &routerProc{c: c, k: k, addr: "127.0.0.1:0"}
		c.routers = append(c.routers, r)
		if err := r.start(); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// natsURL is what every process of the nats plane connects to: the
// single server's URL, or every cluster node's.
func (c *cluster) natsURL() string {
	if c.cfg.natsCluster != nil {
		return c.cfg.natsCluster.URLs()
	}
	return c.bus.url
}

// natsReplicas is the JetStream replica count of the nats plane's assets:
// one per cluster node.
func (c *cluster) natsReplicas() int {
	if c.cfg.natsCluster != nil {
		return len(c.cfg.natsCluster.Nodes())
	}
	return 1
}

func (c *cluster) close() {
	for _, r := range c.routers {
		r.stop()
	}
	for _, w := range c.workers {
		w.stop()
		w.proxy.close()
	}
	if c.nc != nil {
		c.nc.Close()
	}
	if c.bus != nil {
		c.bus.stop()
	}
}

// start runs a fresh worker process: empty cache, event sequence from 0.
func (w *worker) start() error {
	if w.c.cfg.nats {
		return w.startNATS()
	}
	ev := server.DefaultKVEventsConfig()
	ev.EnableKVCacheEvents = true
	ev.Endpoint, ev.ReplayEndpoint, ev.Topic = w.events, w.replay, "kv-events"
	wlog := w.c.log.With("worker", w.name)
	var zs *server.ZMQSink
	var err error
	// A restarted process binds the same ports; the old sockets may take a
	// moment to let go.
	for deadline := time.Now().Add(5 * time.Second); ; {
		zs, err = server.NewZMQSink(ev, server.ZMQOptions{}, 0, 1, wlog)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	w.mu.Lock()
	w.events, w.replay = zs.Endpoint(0), zs.ReplayEndpoint(0)
	w.mu.Unlock()
	return w.run(zs, nil)
}

// run starts the engine process over inner (its event publisher); rsink,
// when set, answers recovery queries from the engine's local indexer.
func (w *worker) run(inner server.EventSink, rsink *server.NATSSink) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen++
	sink := newFaultySink(inner, w.c.cfg.seed*1000+uint64(w.k*100+w.gen), w.c.stats)
	sink.set(w.faults)
	sc := server.DefaultConfig()
	sc.Model = modelName
	sc.Engine = mocker.DefaultConfig()
	sc.Engine.BlockSize = blockSize
	sc.Engine.NumGPUBlocks = w.c.cfg.kvBlocks
	sc.Engine.SpeedupRatio = 200
	sc.Engine.HashSeed = uint64(w.k) * 7919 // engines need not share a seed
	sc.WorkerID = w.id
	sc.Tokenizer = w.c.tok
	sc.Logger = w.c.log.With("worker", w.name)
	sc.Sinks = []server.EventSink{sink}
	sc.Disagg = w.disagg()
	srv, err := server.New(sc)
	if err == nil && rsink != nil {
		err = rsink.Serve(srv)
	}
	if err != nil {
		_ = sink.Close()
		return fmt.Errorf("%s: %w", w.name, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.CloseSinks()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.srv, w.sink, w.cancel, w.done = srv, sink, cancel, make(chan error, 1)
	w.url = "http://" + ln.Addr().String()
	w.proxy.setBackend(ln.Addr().String())
	done := w.done
	go func() { done <- srv.Serve(ctx, ln) }()
	return nil
}

// stop crashes the worker: every connection through its proxy is cut,
// then the process stops. Idempotent.
func (w *worker) stop() {
	w.mu.Lock()
	cancel, done, lease, nc := w.cancel, w.done, w.lease, w.nc
	w.cancel, w.done, w.srv, w.lease, w.nc = nil, nil, nil, nil, nil
	w.mu.Unlock()
	if cancel == nil {
		return
	}
	if lease != nil {
		lease.Abandon() // a crash: the registration expires after its TTL
		w.c.abandon(w.name)
	}
	w.proxy.setBackend("127.0.0.1:1") // nothing listens there: refused
	w.proxy.cut()
	cancel()
	<-done
	if nc != nil {
		nc.Close()
	}
}

func (w *worker) running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.srv != nil
}

func (w *worker) setFaults(f eventFaults) {
	w.mu.Lock()
	w.faults = f
	s := w.sink
	w.mu.Unlock()
	if s != nil {
		s.set(f)
	}
}

// static is the worker as the routers know it: the proxy's URL.
func (w *worker) static() fleet.StaticWorker {
	w.mu.Lock()
	defer w.mu.Unlock()
	role, bootstrap := w.role()
	return fleet.StaticWorker{Name: w.name, URL: "http://" + w.proxy.addr(), Events: w.events, Replay: w.replay,
		Topic: "kv-events", BlockSize: blockSize, KVBlocks: uint64(w.c.cfg.kvBlocks), Role: string(role), BootstrapPort: bootstrap}
}

// truth is the engine's cached block multiset (its local indexer).
func (w *worker) truth() ([]blockKey, bool) {
	w.mu.Lock()
	srv := w.srv
	w.mu.Unlock()
	if srv == nil {
		return nil, false
	}
	_, evs := srv.LocalIndex(0).Dump()
	return keys(evs), true
}

// direct sends one short request straight to the worker (not through a
// router): what an engine's own startup check or another client does.
func (w *worker) direct(ctx context.Context, prompt []uint32) error {
	w.mu.Lock()
	u := w.url
	w.mu.Unlock()
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":2}`, modelName, jsonInts(prompt))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s direct: %s", w.name, resp.Status)
	}
	return nil
}

// resetEngine makes the engine look restarted to the routers without a new
// process: the prefix cache is dropped (AllBlocksCleared) and that batch
// starts a new event sequence at 0 with an empty replay buffer. vLLM
// refuses the reset while requests run, so it is retried until ctx ends.
func (w *worker) resetEngine(ctx context.Context) error {
	w.mu.Lock()
	u, sink := w.url, w.sink
	w.mu.Unlock()
	if sink == nil {
		return fmt.Errorf("%s is down", w.name)
	}
	sink.restartAtClear(true)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/reset_prefix_cache", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			sink.restartAtClear(false)
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (r *routerProc) start() error {
	r.gen.Add(1)
	cfg := config.Default()
	cfg.Port = 0
	cfg.DataDir = r.c.cfg.dataDir
	for _, w := range r.c.workers {
		cfg.Workers = append(cfg.Workers, w.static())
	}
	cfg.BlockSize = blockSize
	cfg.EventPlane.Kind = "none" // the engines' own ZMQ streams, straight from each worker
	if r.c.cfg.nats {
		cfg.Workers = nil // discovered in the registry
		cfg.EventPlane.Kind = config.PlaneNATS
		cfg.EventPlane.NATS.URL = r.c.natsURL()
		cfg.EventPlane.NATS.Replicas = r.c.natsReplicas()
		cfg.EventPlane.NATS.ReconnectWait = 50 * time.Millisecond
		cfg.EventPlane.Registry.TTL = r.c.ttl()
		cfg.EventPlane.Durable = r.c.cfg.durable
		cfg.EventPlane.ReplicaSync = r.c.cfg.replicaSync
		cfg.Router.ID = uint64(r.k + 1) // a durable consumer per router, kept across its restarts
	}
	if pd := r.c.cfg.pd; pd != nil {
		cfg.Frontend.PD.Protocol = pd.protocol
	}
	cfg.Router.Seed = r.c.cfg.seed + uint64(r.k)
	cfg.Events.HealthInterval = 100 * time.Millisecond
	cfg.Events.HealthTimeout = 500 * time.Millisecond
	cfg.Events.HealthFailures = 2
	cfg.Events.DialRetry = 20 * time.Millisecond
	cfg.Events.ReplayTimeout = 2 * time.Second
	cfg.Frontend.ShutdownTimeout = 2 * time.Second
	cfg.Frontend.DialTimeout = 500 * time.Millisecond
	log := r.c.log.With("router", r.k)
	reg := prometheus.NewRegistry()
	svc, err := service.New(cfg, service.Options{Logger: log, Registry: reg})
	if err != nil {
		return fmt.Errorf("router %d: %w", r.k, err)
	}
	r.mu.Lock()
	addr := r.addr
	r.mu.Unlock()
	var ln net.Listener
	for deadline := time.Now().Add(5 * time.Second); ; {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		svc.Close()
		return fmt.Errorf("router %d: %w", r.k, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := svc.Run(ctx, ln)
		if ctx.Err() == nil {
			// Exited on its own: what a supervisor (systemd, Kubernetes)
			// would see and restart.
			r.c.log.Error("CHAOS router exited on its own", "router", r.k, "err", err)
			r.exited.Store(true)
		}
		done <- err
	}()
	r.exited.Store(false)
	r.starting.begin(0)
	go func() {
		defer r.starting.end(0)
		for svc.Addr() == nil && !r.exited.Load() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	r.mu.Lock()
	r.addr = ln.Addr().String()
	r.svc, r.cancel, r.done, r.reg = svc, cancel, done, reg
	r.mu.Unlock()
	return nil
}

// stop shuts the router down (gracefully, bounded). Idempotent.
func (r *routerProc) stop() error {
	r.mu.Lock()
	cancel, done, svc := r.cancel, r.done, r.svc
	r.cancel, r.done, r.svc = nil, nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	err := <-done
	if err != nil && svc.Addr() == nil {
		// Stopped (or failed) before it ever served: a start-up that NATS
		// trouble made fail; what a supervisor restarts.
		r.c.log.Warn("CHAOS router start-up failed before serving", "router", r.k, "err", err)
		r.c.stats.add("router start-up failed before serving (restarted)", 1)
		return nil
	}
	return err
}

func (r *routerProc) service() *service.Service {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.svc
}

func (r *routerProc) url() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "http://" + r.addr
}

// blockKey is one cached block of one worker rank.
type blockKey struct {
	worker kvevent.WorkerRank
	tier   kvevent.Tier
	engine uint64
	local  uint64
}

func keys(evs []kvevent.Event) []blockKey {
	var out []blockKey
	for _, e := range evs {
		for _, b := range e.Blocks {
			out = append(out, blockKey{e.Worker, e.Tier, b.EngineHash, b.LocalHash})
		}
	}
	slices.SortFunc(out, func(a, b blockKey) int {
		return cmp.Or(cmp.Compare(a.worker.ID, b.worker.ID), cmp.Compare(a.worker.Rank, b.worker.Rank),
			cmp.Compare(a.tier, b.tier), cmp.Compare(a.engine, b.engine), cmp.Compare(a.local, b.local))
	})
	return out
}

// indexMatches compares every running router's exact index with the
// engines' caches; it returns a description of the first difference.
func (c *cluster) indexMatches() (bool, string) {
	var want []blockKey
	for _, w := range c.workers {
		t, ok := w.truth()
		if !ok {
			return false, w.name + " is down"
		}
		want = append(want, t...)
	}
	want = keys(toEvents(want))
	for _, r := range c.routers {
		svc := r.service()
		if svc == nil {
			return false, fmt.Sprintf("router %d is down", r.k)
		}
		if err := svc.Index().Flush(); err != nil {
			return false, err.Error()
		}
		got := keys(svc.Index().Dump())
		if !slices.Equal(got, want) {
			return false, fmt.Sprintf("router %d: index %s; engines %s", r.k, summary(got), summary(want))
		}
	}
	return true, ""
}

func toEvents(ks []blockKey) []kvevent.Event {
	out := make([]kvevent.Event, len(ks))
	for i, k := range ks {
		out[i] = kvevent.Event{Worker: k.worker, Tier: k.tier, Kind: kvevent.Stored,
			Blocks: []kvevent.Block{{EngineHash: k.engine, LocalHash: k.local}}}
	}
	return out
}

func summary(ks []blockKey) string {
	per := map[kvevent.WorkerRank]int{}
	for _, k := range ks {
		per[k.worker]++
	}
	var parts []string
	for w, n := range per {
		parts = append(parts, fmt.Sprintf("%v:%d", w, n))
	}
	slices.Sort(parts)
	return fmt.Sprintf("%d blocks [%s]", len(ks), strings.Join(parts, " "))
}

// noBookings reports whether every running router holds no request.
func (c *cluster) noBookings() (bool, string) {
	for _, r := range c.routers {
		svc := r.service()
		if svc == nil {
			continue
		}
		for _, l := range svc.Router().Loads() {
			if l.ActiveRequests != 0 || l.ActivePrefillTokens != 0 || l.ActiveBlocks != 0 {
				return false, fmt.Sprintf("router %d still books %+v", r.k, l)
			}
		}
	}
	return true, ""
}

func jsonInts(p []uint32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, t := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, t)
	}
	b.WriteByte(']')
	return b.String()
}
