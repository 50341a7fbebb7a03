package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/replica"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Options are what a Service takes besides its Config: the process-wide
// things a caller (the command, a test) owns.
type Options struct {
	// Logger receives every component's logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives every component's metrics and is what /metrics
	// serves; nil means a fresh registry (never the global one).
	Registry *prometheus.Registry
	// Clock is the time source; nil means time.Now.
	Clock func() time.Time
}

// Service is one kvrouter router process: the router core, its index, the
// worker set with its event subscribers, health probes, and the HTTP front
// door. Build it with New, run it once with Run.
type Service struct {
	cfg   config.Config
	log   *slog.Logger
	reg   *prometheus.Registry
	clock func() time.Time

	idx *liveindex.Index
	// pools routes every model (one router core per model), all of
	// which replica sync shares with peers; router is the default model's.
	pools    *router.Pools
	router   *router.Router
	catalog  *catalog
	adapters *adapterSet
	dir      *fleet.Directory
	workers  *workerSet
	front    *frontend.Frontend
	ranks    []*rankState
	zm       *vllmzmq.Metrics

	// The event plane (see plane.go); each nil when not configured.
	bus         *natsbus.Bus
	natsC       *natsevents.Consumer
	zmqC        *zmqevents.Consumer
	dur         *durable.Consumer
	rs          *replica.Sync     // written by the NATS start-up, read after it
	sess        *replica.Sessions // likewise (sessions.go)
	unhook      func()
	staticNotes []fleet.Notification
	regSynced   atomic.Bool
	planeOnce   sync.Once

	// NATS start-up (startup.go).
	boot           startup
	startRetries   *prometheus.CounterVec // step
	replicaMetrics forwardCollector

	ran       atomic.Bool
	closeOnce sync.Once
	started   atomic.Int64 // Unix ns when Run started; 0 before
	gaveUp    atomic.Bool
	addr      atomic.Value // net.Addr once serving
}

// ErrRun is returned by a second call to Run.
var ErrRun = errors.New("service: Run called twice")

// New builds everything the configuration describes; it validates cfg,
// loads the tokenizer and chat template, checks the static workers against
// the router's block size (refusing mismatches loudly), and prepares one
// event subscriber per event-fed worker rank. It starts only the index's
// writer goroutines: call Run, or Close if Run will not be called.
func New(cfg config.Config, o Options) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, err := newService(cfg, o)
	if err != nil {
		return nil, err
	}
	model, err := LoadModel(cfg.TokenizerDir)
	if err != nil {
		return nil, err
	}
	if s.catalog, err = loadCatalog(cfg); err != nil {
		return nil, err
	}
	if f := cfg.Frontend; f.TLSCertFile != "" {
		if _, err := tls.LoadX509KeyPair(f.TLSCertFile, f.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
	}
	notes, err := s.buildDirectory()
	if err != nil {
		return nil, err
	}
	if err := s.build(notes, model); err != nil {
		s.abandon()
		return nil, err
	}
	return s, nil
}

// newService is a Service with o's defaults filled in and the Go runtime's
// collectors on its registry.
func newService(cfg config.Config, o Options) (*Service, error) {
	s := &Service{cfg: cfg, log: o.Logger, reg: o.Registry, clock: o.Clock}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if err := registerRuntime(s.reg); err != nil {
		return nil, err
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s, nil
}

// buildDirectory builds the fleet directory from the static workers and
// returns its first notifications (one per accepted or refused worker).
func (s *Service) buildDirectory() ([]fleet.Notification, error) {
	recs, err := s.cfg.WorkerRecords()
	if err != nil {
		return nil, fmt.Errorf("static workers: %w", err)
	}
	expect := fleet.Expect{BlockSize: s.cfg.BlockSize, Model: s.cfg.Model, Hash: fleet.DefaultHashContract(), Takeover: s.cfg.EventPlane.Registry.TTL / 2}
	dir, notes, err := fleet.NewDirectory(expect, recs, s.log, s.clock())
	if err != nil {
		return nil, fmt.Errorf("building the worker directory: %w", err)
	}
	s.dir = dir
	return notes, nil
}

// build runs the steps of New that may leave something to undo (the
// index's writers, the embedded NATS server): New calls abandon when it
// fails.
func (s *Service) build(notes []fleet.Notification, model Model) error {
	if err := s.buildCore(); err != nil {
		return err
	}
	if err := s.prepareEvents(notes); err != nil {
		return err
	}
	return s.buildFront(model)
}

// abandon undoes what build started, for a New that failed: the embedded
// NATS server, then the index's writers.
func (s *Service) abandon() {
	if s.bus != nil {
		s.bus.Shutdown()
		s.bus.WaitForShutdown()
	}
	if s.idx != nil {
		s.idx.Close()
	}
}

// buildCore builds the index (starting its writers), the router core (a
// random router id when replica sync is on without one), the worker set,
// and the event and start-up metrics.
func (s *Service) buildCore() error {
	ic := s.cfg.IndexConfig()
	ic.OnError = func(w kvevent.WorkerRank, err error) {
		s.log.Debug("index refused an operation", "worker", w.String(), "err", err)
	}
	var err error
	if s.idx, err = liveindex.New(ic); err != nil {
		return fmt.Errorf("building the index: %w", err)
	}
	rc := s.cfg.RouterConfig()
	if s.cfg.EventPlane.ReplicaSync && rc.RouterID == 0 {
		rc.RouterID = replica.NewRouterID()
	}
	if s.pools, err = router.NewPools(s.cfg.Model, rc, s.idx, s.clock, nil); err != nil {
		return fmt.Errorf("building the router: %w", err)
	}
	s.router, _ = s.pools.Pool("")
	s.adapters = newAdapterSet()
	s.catalog.bind(s.pools, s.dir, s.adapters)
	s.workers = newWorkerSet(s.dir, s.pools, s.clock, s.log, s.cfg.Events.SilentAfter)
	s.workers.adapters = s.adapters
	if s.zm, err = vllmzmq.NewMetrics(s.reg); err != nil {
		return fmt.Errorf("registering event metrics: %w", err)
	}
	s.startRetries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_nats_startup_retries_total",
		Help: "Failed NATS start-up steps retried, by step (connect, connection, durable, replica, registry, watch)."}, []string{"step"})
	if err := s.reg.Register(s.startRetries); err != nil {
		return fmt.Errorf("registering service metrics: %w", err)
	}
	return nil
}

// prepareEvents builds the event plane and adds the static workers: with
// NATS it secures the configuration and starts the embedded server (a
// failure is a misconfiguration: its port taken, its store unusable; an
// external one is connected to by Run, or ConnectNATS, retried until it
// answers), adds the workers, then builds the NATS consumers; without, it
// builds the plane first.
func (s *Service) prepareEvents(notes []fleet.Notification) error {
	if s.cfg.EventPlane.Kind == config.PlaneNATS {
		s.secureNATS()
		if s.cfg.EventPlane.NATS.Embedded() {
			var err error
			if s.bus, err = natsbus.Start(s.cfg.NATSConfig(), s.log.With("component", "nats")); err != nil {
				return fmt.Errorf("starting the embedded NATS server (--nats-port %d; --nats-url for an external one, --event-plane none for none): %w", s.cfg.EventPlane.NATS.Port, err)
			}
		}
	} else if err := s.newPlane(); err != nil {
		return err
	}
	for _, n := range notes {
		if n.Kind != fleet.Added {
			continue
		}
		if err := s.addWorker(n.Worker.Record, n.Worker.Origin); err != nil {
			return err
		}
		s.staticNotes = append(s.staticNotes, n)
	}
	if s.bus != nil {
		return s.buildNATSPlane()
	}
	return nil
}

// buildFront builds the front door on the router and registers the
// service's own collectors.
func (s *Service) buildFront(model Model) error {
	var err error
	s.front, err = frontend.New(s.cfg.FrontendConfig(), frontend.Deps{
		Router: s.pools, Directory: s.workers, Tokenizer: model.Tokenizer, ChatTemplate: model.Template, Models: s.catalog,
		Index: s.idx, Registry: s.reg, Logger: s.log, Clock: s.clock, Ready: s.Ready,
	})
	if err != nil {
		return fmt.Errorf("building the front door: %w", err)
	}
	if err := s.reg.Register(&collector{s: s}); err != nil {
		return fmt.Errorf("registering service metrics: %w", err)
	}
	if err := s.reg.Register(&s.replicaMetrics); err != nil {
		return fmt.Errorf("registering replica metrics: %w", err)
	}
	return nil
}

// secureNATS makes the safe path the default: an embedded NATS server
// with no credential configured requires a random token kept in
// <data-dir>/nats-token (created on first start, reused after), which the
// router's own clients present; other processes are given the file
// (--nats-token-file). Whatever stays without a credential is warned
// about loudly: NATS write access is the power to register a worker and
// be sent prompts.
func (s *Service) secureNATS() {
	nc := &s.cfg.EventPlane.NATS
	if nc.Embedded() && !nc.HasAuth() {
		nc.TokenFile = filepath.Join(s.cfg.DataDir, "nats-token")
	}
	httpKeys := len(s.cfg.Frontend.APIKeys) > 0 || len(s.cfg.Frontend.AdminKeys) > 0
	for _, w := range nc.AuthWarnings(httpKeys) {
		s.log.Warn("SECURITY: "+w+"; set --nats-token-file, --nats-token, --nats-user or --nats-creds", "nats_url", redactURL(nc.URL))
	}
}

// addWorker adds an accepted worker to the router and the worker set
// and, when its events are the engine's own ZMQ stream, prepares one
// subscriber per dp rank (started by Run; only static workers have one).
// Event-plane workers are handed to the plane's consumer by the caller.
func (s *Service) addWorker(rec fleet.WorkerRecord, origin fleet.Origin) error {
	src, why := s.sourceOf(rec, origin)
	if why != "" {
		s.log.Warn("worker declares KV events this router does not read: routed in approximate mode", "worker", rec.Name, "reason", why)
	}
	if err := s.pools.AddWorker(rec.Model, workerInfo(rec, src)); err != nil {
		return fmt.Errorf("worker %q: %w", rec.Name, err)
	}
	w := s.workers.add(rec, src)
	s.adapters.kick(rec.ID)
	if src != sourceEngine {
		return nil
	}
	for i, r := range w.ranks {
		sc := vllmzmq.DefaultSubscriberConfig()
		sc.Worker = r.worker
		var err error
		if sc.Endpoint, err = vllmzmq.OffsetEndpoint(rec.Events.Endpoint, i); err != nil {
			return fmt.Errorf("worker %q events: %w", rec.Name, err)
		}
		if rec.Events.Replay != "" {
			if sc.ReplayEndpoint, err = vllmzmq.OffsetEndpoint(rec.Events.Replay, i); err != nil {
				return fmt.Errorf("worker %q replay: %w", rec.Name, err)
			}
		}
		sc.Topic = rec.Events.Topic
		sc.BlockSize = rec.BlockSize
		sc.DialRetry = s.cfg.Events.DialRetry
		sc.ReplayTimeout = s.cfg.Events.ReplayTimeout
		sc.Logger = s.log.With("worker_name", rec.Name)
		sc.Metrics = s.zm
		sub, err := vllmzmq.NewSubscriber(sc, r)
		if err != nil {
			return fmt.Errorf("worker %q events: %w", rec.Name, err)
		}
		s.workers.mu.Lock()
		r.sub = sub
		s.workers.mu.Unlock()
		s.ranks = append(s.ranks, r)
	}
	return nil
}

// workerInfo is what the router core needs of a worker whose events come
// from src.
func workerInfo(rec fleet.WorkerRecord, src source) router.WorkerInfo {
	mode := router.Approximate
	if src != sourceNone {
		mode = router.Exact
	}
	return router.WorkerInfo{ID: rec.ID, BlockSize: rec.BlockSize, DPStart: int(rec.DPStart), DPSize: int(rec.DPSize),
		KVCapacityBlocks: int(rec.KVCapacityBlocks), MaxBatchedTokens: int(rec.MaxBatchedTokens), Mode: mode,
		Role: routerRole(rec.Role)}
}

// routerRole is the router core's name for a record's role.
func routerRole(r fleet.Role) router.Role {
	switch r.Normal() {
	case fleet.RolePrefill:
		return router.RolePrefill
	case fleet.RoleDecode:
		return router.RoleDecode
	}
	return router.RoleBoth
}

// Run serves the front door on ln and runs the event subscribers, health
// probes and periodic sweeps until ctx is cancelled, then shuts down
// gracefully: it stops accepting, lets in-flight requests finish (bounded
// by --shutdown-timeout), then stops the subscribers and the index. It
// returns nil after a clean shutdown, or the listener's error.
//
// With the NATS event plane, the front door serves at once while the
// NATS start-up (connect, subscribe, durable consumer, replica sync,
// worker registry) runs next to it, each step retried with backoff until
// it succeeds: /ready says what it waits for. Only a misconfiguration
// (credentials refused, TLS) ends Run early, with an ErrStartup error.
func (s *Service) Run(ctx context.Context, ln net.Listener) error {
	if !s.ran.CompareAndSwap(false, true) {
		return ErrRun
	}
	defer s.Close()
	s.started.Store(s.clock().UnixNano())
	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer s.closePlane()
	fatal := make(chan error, 1)
	if err := s.startBackground(bg, &wg, fatal); err != nil {
		stopBG()
		ln.Close()
		return err
	}
	srv, errc := s.serve(ln)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		errc = nil
	case serveErr = <-fatal:
		s.log.Error("giving up: NATS start-up cannot succeed with this configuration", "err", serveErr)
	}
	if err := s.drain(srv, errc); err != nil && serveErr == nil {
		serveErr = err
	}
	stopBG()
	wg.Wait() // the NATS start-up too: s.rs is settled
	s.closeSessions()
	if s.rs != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.rs.Close(cctx); err != nil {
			s.log.Warn("replica sync did not close cleanly", "err", err)
		}
		cancel()
	}
	s.log.Info("kvrouter stopped")
	return serveErr
}

// startBackground starts, on wg until bg ends, the event plane (with
// NATS, its start-up, whose misconfiguration goes to fatal), the vLLM
// subscribers, the sweep, the silence watchdog and the health prober.
// Without NATS, a plane that cannot start is returned with nothing
// started.
func (s *Service) startBackground(bg context.Context, wg *sync.WaitGroup, fatal chan<- error) error {
	if s.cfg.EventPlane.Kind == config.PlaneNATS {
		wg.Go(func() {
			if err := s.startNATS(bg); err != nil && bg.Err() == nil {
				fatal <- err
			}
		})
	} else if _, err := s.startPlane(bg); err != nil { // no NATS: nothing to follow
		return err
	}
	for _, r := range s.ranks {
		wg.Go(func() {
			if err := r.sub.Run(bg); err != nil {
				s.log.Error("KV event subscriber stopped", "worker", r.w.name, "dp_rank", r.worker.Rank, "err", err)
			}
		})
	}
	wg.Go(func() { s.sweepLoop(bg) })
	wg.Go(func() { s.silenceLoop(bg) })
	if s.cfg.Events.HealthInterval > 0 {
		wg.Go(func() { s.healthLoop(bg) })
	}
	if s.cfg.Events.LoRARefresh > 0 {
		wg.Go(func() { s.adapterLoop(bg) })
	}
	return nil
}

// serve starts the front door's server on ln (TLS when configured); its
// Serve's result arrives on the returned channel.
func (s *Service) serve(ln net.Listener) (*frontend.Server, chan error) {
	srv := s.front.NewServer(ln)
	s.addr.Store(ln.Addr())
	errc := make(chan error, 1)
	tlsOn := s.cfg.Frontend.TLSCertFile != ""
	go func() {
		if tlsOn {
			errc <- srv.ServeTLS(s.cfg.Frontend.TLSCertFile, s.cfg.Frontend.TLSKeyFile)
			return
		}
		errc <- srv.Serve()
	}()
	s.log.Info("kvrouter serving", "addr", ln.Addr().String(), "static_workers", len(s.staticNotes),
		"tls", tlsOn, "event_streams", len(s.ranks), "event_plane", s.cfg.EventPlane.Kind, "block_size", s.cfg.BlockSize, "model", s.cfg.Model)
	return srv, errc
}

// drain stops accepting and waits for the in-flight requests (bounded by
// --shutdown-timeout), then for Serve's result on errc (nil: already
// received), which it returns.
func (s *Service) drain(srv *frontend.Server, errc chan error) error {
	s.log.Info(fmt.Sprintf("shutting down: no new connections; waiting up to %v for %d in-flight requests", s.cfg.Frontend.ShutdownTimeout, s.inFlight()),
		"timeout", s.cfg.Frontend.ShutdownTimeout)
	if err := srv.Shutdown(context.Background()); err != nil {
		s.log.Warn("in-flight requests did not finish in time; they were closed and their bookings freed", "err", err)
	}
	if errc == nil {
		return nil
	}
	return <-errc
}

// inFlight counts the requests booked on the workers (with replica sync,
// the peers' bookings too).
func (s *Service) inFlight() int {
	n := 0
	for _, l := range s.pools.Loads() {
		n += l.ActiveRequests
	}
	return n
}

// Close stops the event plane's consumers, the NATS connection (and the
// embedded server) and the index writers. Run calls it on return; call it
// yourself only for a Service that is never run. Idempotent.
func (s *Service) Close() {
	s.closeOnce.Do(func() {
		s.closePlane()
		s.closeSessions()
		if s.rs != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.rs.Close(cctx)
			cancel()
		}
		if s.bus != nil {
			s.bus.Shutdown()
			s.bus.WaitForShutdown()
		}
		s.idx.Close()
	})
}

// Bus returns the NATS bus (nil unless --event-plane nats; with an
// external server, nil until connected: call ConnectNATS before Run to
// use it): `kvrouter up` connects its mock workers through it.
func (s *Service) Bus() *natsbus.Bus { return s.bus }

// RouterID returns the id stamped on this router's lifecycle events
// (random per start with replica sync and no --router-id).
func (s *Service) RouterID() uint64 { return s.router.Config().RouterID }

// Ready reports readiness for /ready: nil once the NATS start-up is done
// (never given up: the reason says what it waits for) and every
// event-fed worker rank's initial replay is done or given up
// (--ready-timeout after Run started).
func (s *Service) Ready() error {
	start := s.started.Load()
	if start == 0 {
		return errors.New("starting")
	}
	if s.cfg.EventPlane.Kind == config.PlaneNATS && !s.boot.done.Load() {
		if st := s.boot.String(); st != "" {
			return errors.New(st)
		}
		return errors.New("NATS start-up")
	}
	ok, pending := s.workers.synced()
	if !s.regSynced.Load() {
		ok, pending = false, append(pending, "the worker registry")
	}
	if ok {
		return nil
	}
	if t := s.cfg.Events.ReadyTimeout; t > 0 && s.clock().Sub(time.Unix(0, start)) >= t {
		if s.gaveUp.CompareAndSwap(false, true) {
			s.log.Warn("gave up waiting for the initial event replay; ready anyway (these workers stay DEGRADED until their events arrive)",
				"pending", strings.Join(pending, ", "), "after", t)
		}
		return nil
	}
	return fmt.Errorf("waiting for the initial KV event replay of %s", strings.Join(pending, ", "))
}

// Handler returns the front door's HTTP handler (what Run serves).
func (s *Service) Handler() http.Handler { return s.front.Handler() }

// Router returns the default model's router core.
func (s *Service) Router() *router.Router { return s.router }

// Pools returns the router cores of every model.
func (s *Service) Pools() *router.Pools { return s.pools }

// Index returns the prefix index.
func (s *Service) Index() *liveindex.Index { return s.idx }

// Registry returns the registry /metrics serves.
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// Workers returns every worker with its state, by name.
func (s *Service) Workers() []frontend.WorkerEntry { return s.workers.List() }

// Addr returns the address Run serves on, or nil before Run.
func (s *Service) Addr() net.Addr {
	a, _ := s.addr.Load().(net.Addr)
	return a
}

// sweepLoop frees expired bookings and drops expired approximate and
// predicted index entries; the router core starts no timers itself.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.Router.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if freed := s.pools.Sweep(); len(freed) > 0 {
				s.log.Warn("freed expired bookings (a Free was lost)", "count", len(freed))
			}
		}
	}
}

// silenceLoop looks for event-fed workers serving requests without
// publishing events.
func (s *Service) silenceLoop(ctx context.Context) {
	every := min(max(s.cfg.Events.SilentAfter/4, 10*time.Millisecond), 5*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			active := map[kvevent.WorkerID]int{}
			for _, l := range s.pools.Loads() {
				active[l.Worker.ID] += l.ActiveRequests
			}
			s.workers.checkSilence(active, s.clock())
		}
	}
}

// healthLoop probes every worker's /health; failures in a row mark it DOWN
// (not routed to), one success brings it back. A timeout while the
// worker's events kept arriving is not a failure (workerSet.probed).
func (s *Service) healthLoop(ctx context.Context) {
	client := &http.Client{Timeout: s.cfg.Events.HealthTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(s.cfg.Events.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for id, u := range s.workers.urls() {
			wg.Go(func() {
				started := s.clock()
				err := probe(ctx, client, strings.TrimRight(u, "/")+"/health")
				if ctx.Err() != nil {
					return
				}
				s.workers.probed(id, err, s.cfg.Events.HealthFailures, started)
			})
		}
		wg.Wait()
	}
}

func probe(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
