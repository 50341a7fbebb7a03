package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ErrCrashed is returned by Serve when the CrashAfter fault fired.
var ErrCrashed = errors.New("mock worker crashed (fault injection)")

// Worker is one mock vLLM server: an OpenAI-compatible HTTP API in front of
// DataParallelSize engine ranks, each stepped by its own goroutine on the
// real clock.
type Worker struct {
	cfg      Config
	tok      Tokenizer
	log      *slog.Logger
	reg      *prometheus.Registry
	ranks    []*rank
	nextID   atomic.Uint64
	rr       atomic.Uint64
	done     atomic.Int64
	armed    atomic.Bool
	crash    chan struct{}
	crashOne sync.Once
	started  time.Time
	mux      *http.ServeMux
	closeOne sync.Once
	pd       pdState
}

// CloseSinks closes the configured event sinks; Serve does it on return,
// so call it only for a worker that is never served. Idempotent.
func (w *Worker) CloseSinks() {
	w.closeOne.Do(func() {
		for _, s := range w.cfg.Sinks {
			_ = s.Close()
		}
	})
}

// New builds a worker; Serve runs it.
func New(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Disagg = cfg.Disagg.normal()
	w := &Worker{cfg: cfg, tok: cfg.Tokenizer, log: cfg.Logger, reg: cfg.Registry,
		crash: make(chan struct{}), started: time.Now(), pd: pdState{holds: map[string]*hold{}}}
	if w.tok == nil {
		w.tok = WordTokenizer{}
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.reg == nil {
		// A registry of its own serves the worker's /metrics alone, as a
		// vLLM server's does: with the Go runtime and process collectors.
		w.reg = prometheus.NewRegistry()
		w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := newMetrics(w.reg)
	for i := range cfg.DataParallelSize {
		eng, err := mocker.NewEngine(cfg.Engine)
		if err != nil {
			return nil, err
		}
		wk := kvevent.WorkerRank{ID: kvevent.WorkerID(cfg.WorkerID), Rank: kvevent.DPRank(i)}
		r := &rank{idx: i, eng: eng, cmds: make(chan rankCmd, 1024), streams: map[uint64]*stream{},
			metrics: m.forRank(cfg.servedName(), i), local: localindex.New(wk, localindex.Capacity), worker: wk}
		w.ranks = append(w.ranks, r)
	}
	w.routes()
	return w, nil
}

// LocalIndex returns rank's local indexer (the worker's record of what it
// has cached and its recent events), or nil for an unknown rank.
func (w *Worker) LocalIndex(rank int) *localindex.Index {
	if rank < 0 || rank >= len(w.ranks) {
		return nil
	}
	return w.ranks[rank].local
}

// Handler returns the worker's HTTP API.
func (w *Worker) Handler() http.Handler { return w.mux }

// Registry returns the registry the worker's metrics live in.
func (w *Worker) Registry() *prometheus.Registry { return w.reg }

// finished counts a request whose response was written in full; the
// CrashAfter fault fires on the Nth.
// finished arms the crash; it fires when a connection next goes idle or
// closes, that is once the Nth response has been sent in full.
func (w *Worker) finished() {
	if n := w.done.Add(1); w.cfg.Faults.CrashAfter > 0 && n >= int64(w.cfg.Faults.CrashAfter) {
		w.armed.Store(true)
	}
}

func (w *Worker) connState(_ net.Conn, s http.ConnState) {
	if (s == http.StateIdle || s == http.StateClosed) && w.armed.Load() {
		w.crashOne.Do(func() { close(w.crash) })
	}
}

// Serve runs the engine ranks and the HTTP API on ln until ctx is cancelled
// (graceful shutdown: in-flight streams end, the listener closes, every
// goroutine exits) or the CrashAfter fault fires (abrupt stop, ErrCrashed).
func (w *Worker) Serve(ctx context.Context, ln net.Listener) error {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sink := newFaultSink(rctx, w.cfg.Faults, w.cfg.Sinks)
	var wg sync.WaitGroup
	for _, r := range w.ranks {
		r.faults = sink
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(rctx)
		}()
	}
	srv := &http.Server{Handler: w.mux, ReadHeaderTimeout: 10 * time.Second, ConnState: w.connState,
		BaseContext: func(net.Listener) context.Context { return rctx }}
	w.pd.mu.Lock()
	w.pd.addr = ln.Addr().String()
	w.pd.mu.Unlock()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	if bp := w.cfg.Disagg.BootstrapPort; bp > 0 {
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		bln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(bp)))
		if err != nil {
			_ = srv.Close()
			<-errc
			cancel()
			wg.Wait()
			sink.wait()
			w.CloseSinks()
			return fmt.Errorf("bootstrap port: %w", err)
		}
		go func() { errc <- srv.Serve(bln) }()
	}
	w.log.Info("mock worker serving", "addr", ln.Addr().String(), "model", w.cfg.servedName(),
		"dp_size", len(w.ranks), "worker_id", w.cfg.WorkerID)

	var err error
	select {
	case <-ctx.Done():
		cancel() // end rank loops: open streams fail, handlers return
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		if srv.Shutdown(sctx) != nil {
			// The grace period ran out with connections still open (a
			// client's fresh keep-alive connection that never sent a
			// request counts as busy for 5 s): close them, so that none
			// outlives the worker.
			_ = srv.Close()
		}
		scancel()
		<-errc
	case <-w.crash:
		w.log.Warn("mock worker crashing (fault injection)", "after_requests", w.cfg.Faults.CrashAfter)
		_ = srv.Close()
		cancel()
		<-errc
		err = ErrCrashed
	case err = <-errc:
		_ = srv.Close() // the bootstrap listener too
		cancel()
		err = fmt.Errorf("serving http: %w", err)
	}
	wg.Wait()
	w.stopHolds()
	sink.wait()
	w.CloseSinks()
	w.log.Info("mock worker stopped", "addr", ln.Addr().String(), "err", err)
	return err
}

func (w *Worker) routes() {
	w.mux = http.NewServeMux()
	w.mux.HandleFunc("POST /v1/completions", w.handleCompletions)
	w.mux.HandleFunc("POST /v1/chat/completions", w.handleChat)
	w.mux.HandleFunc("GET /v1/models", w.handleModels)
	w.mux.HandleFunc("POST /tokenize", w.handleTokenize)
	w.mux.HandleFunc("POST /detokenize", w.handleDetokenize)
	w.mux.HandleFunc("POST /reset_prefix_cache", w.handleReset)
	w.mux.HandleFunc("POST /kv/pull", w.handleKVPull)
	w.mux.HandleFunc("POST /kv/release", w.handleKVRelease)
	w.mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	w.mux.HandleFunc("GET /version", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, map[string]string{"version": "kvrouter-mocker"})
	})
	w.mux.Handle("GET /metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
}

// pickRank returns the requested rank, or the one with the fewest requests
// in flight.
func (w *Worker) pickRank(want int) (*rank, error) {
	if want >= 0 {
		if want >= len(w.ranks) {
			return nil, fmt.Errorf("data_parallel_rank %d out of range [0, %d)", want, len(w.ranks))
		}
		return w.ranks[want], nil
	}
	// Ties go round-robin, so sequential requests spread over ranks.
	start := int(w.rr.Add(1))
	best := w.ranks[start%len(w.ranks)]
	for i := 1; i < len(w.ranks); i++ {
		if r := w.ranks[(start+i)%len(w.ranks)]; r.inflight.Load() < best.inflight.Load() {
			best = r
		}
	}
	return best, nil
}

// submit queues one prompt on a rank and returns its stream.
func (w *Worker) submit(ctx context.Context, r *rank, mr mocker.Request, notify chan struct{}) (uint64, *stream, error) {
	id := w.nextID.Add(1)
	mr.ID = id
	st := newStream(notify)
	r.inflight.Add(1)
	select {
	case r.cmds <- rankCmd{add: &mr, st: st}:
		return id, st, nil
	case <-ctx.Done():
		r.inflight.Add(-1)
		return 0, nil, ctx.Err()
	}
}

// abort tells the rank to drop a request (client gone); it never blocks
// the handler for long.
func (w *Worker) abort(r *rank, id uint64) {
	select {
	case r.cmds <- rankCmd{abort: id}:
	case <-time.After(time.Second):
	}
}
