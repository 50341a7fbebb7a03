package frontend

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrDeps reports a missing required dependency.
var ErrDeps = errors.New("missing frontend dependency")

// Frontend is the front door: an http.Handler serving the OpenAI API, the
// router-native API, health, metrics and the status page.
type Frontend struct {
	cfg       Config
	router    Router
	dir       Directory
	idx       Index
	parser    promptParser
	models    Models
	extra     parsers
	reg       *prometheus.Registry
	log       *slog.Logger
	clock     func() time.Time
	ready     func() error
	m         *metrics
	transport *http.Transport
	client    *http.Client
	pdm       *pdMetrics
	blockSize int
	slots     *tokenSlots
	gate      *gate     // the admission queue, nil when off
	sessions  *sessions // session affinity, nil when off
	handler   http.Handler
	// handlers counts running HTTP handlers, so that a forced shutdown
	// can wait for them to return.
	handlers sync.WaitGroup

	idPrefix string
	ids      atomic.Uint64
	// explanations recycles the storage of routing decisions' candidate
	// rows (router.Request.Explanation) once they are rendered.
	explanations sync.Pool

	mu     sync.Mutex
	recent ring
	reqs   rate
	totals totals
}

// totals are the counters the status page shows.
type totals struct {
	Requests, Failed, PromptTokens, Predicted int64
	UsageRequests, UsagePrompt, Actual        int64
}

// New builds a front door. Required deps: Router, Directory, Tokenizer,
// ChatTemplate. Errors wrap ErrConfig or ErrDeps.
func New(cfg Config, deps Deps) (*Frontend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case deps.Router == nil:
		return nil, fmt.Errorf("%w: router", ErrDeps)
	case deps.Directory == nil:
		return nil, fmt.Errorf("%w: worker directory", ErrDeps)
	case deps.Tokenizer == nil:
		return nil, fmt.Errorf("%w: tokenizer", ErrDeps)
	case deps.ChatTemplate == nil:
		return nil, fmt.Errorf("%w: chat template", ErrDeps)
	}
	f := &Frontend{
		cfg: cfg, router: deps.Router, dir: deps.Directory, idx: deps.Index, models: deps.Models, reg: deps.Registry,
		log: deps.Logger, clock: deps.Clock, ready: deps.Ready, blockSize: deps.Router.Config().BlockSize,
	}
	if f.reg == nil {
		f.reg = prometheus.NewRegistry()
	}
	if f.log == nil {
		f.log = slog.Default()
	}
	if f.clock == nil {
		f.clock = time.Now
	}
	if f.ready == nil {
		f.ready = func() error { return nil }
	}
	f.parser = promptParser{model: cfg.Model, aliases: cfg.Aliases, tok: deps.Tokenizer, tmpl: deps.ChatTemplate,
		maxTokens: cfg.MaxPromptTokens, maxOutput: cfg.MaxOutputTokens, maxTokenBytes: longestToken(deps.Tokenizer)}
	slots := cfg.TokenizeConcurrency
	if slots == 0 {
		slots = runtime.GOMAXPROCS(0)
	}
	f.slots = newTokenSlots(slots, cfg.TokenizeQueueTimeout)
	f.recent.buf = make([]record, cfg.RecentDecisions)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	f.idPrefix = "kvr-" + hex.EncodeToString(rnd[:]) + "-"
	f.transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerWorker,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	f.client = &http.Client{Transport: f.transport, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	f.m = newMetrics(f.reg, f)
	f.pdm = newPDMetrics(f.reg)
	if err := f.initAdmission(); err != nil {
		return nil, err
	}
	f.initStatus() // the status page's charts (status.go)
	f.handler = f.routes()
	return f, nil
}

// longestToken returns the byte length of the tokenizer's longest token,
// or 0 when the tokenizer does not expose its vocabulary.
func longestToken(t Tokenizer) int {
	v, ok := t.(vocabulary)
	if !ok {
		return 0
	}
	longest := 0
	for id := range v.VocabSize() {
		if s, ok := v.IDToToken(uint32(id)); ok {
			longest = max(longest, len(s))
		}
	}
	return longest
}

// Handler returns the front door's HTTP handler.
func (f *Frontend) Handler() http.Handler { return f.handler }

// Registry returns the registry the front door's metrics live in.
func (f *Frontend) Registry() *prometheus.Registry { return f.reg }

// CloseIdleConnections closes idle keep-alive connections to workers.
func (f *Frontend) CloseIdleConnections() { f.transport.CloseIdleConnections() }

// access is who may call an endpoint.
type access uint8

const (
	accessOpen  access = iota // probes: /health, /ready
	accessFront               // OpenAI API: API keys or admin keys
	accessAdmin               // admin: admin keys (API keys when no admin keys are set)
)

func (f *Frontend) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, route string, a access, h http.HandlerFunc) {
		mux.Handle(pattern, f.instrument(route, f.auth(a, h)))
	}
	handle("POST /v1/completions", "completions", accessFront, f.handleCompletions)
	handle("POST /v1/chat/completions", "chat_completions", accessFront, f.handleChat)
	handle("GET /v1/models", "models", accessFront, f.handleModels)
	handle("POST /tokenize", "tokenize", accessFront, f.handleTokenize)
	handle("POST /detokenize", "detokenize", accessFront, f.handleDetokenize)
	handle("POST /v1/route", "route", accessAdmin, f.handleRoute)
	handle("POST /v1/query", "query", accessAdmin, f.handleQuery)
	handle("GET /v1/workers", "workers", accessAdmin, f.handleWorkers)
	handle("GET /health", "health", accessOpen, f.handleHealth)
	handle("GET /ready", "ready", accessOpen, f.handleReady)
	handle("GET /metrics", "metrics", accessAdmin, f.handleMetrics)
	handle("GET /{$}", "status", accessAdmin, f.handleStatus)
	allow := map[string]string{
		"/v1/completions": "POST", "/v1/chat/completions": "POST", "/v1/models": "GET", "/v1/route": "POST",
		"/v1/query": "POST", "/v1/workers": "GET", "/health": "GET", "/ready": "GET", "/metrics": "GET", "/": "GET",
		"/tokenize": "POST", "/detokenize": "POST",
	}
	handle("/", "other", accessOpen, func(rw http.ResponseWriter, r *http.Request) {
		if m, ok := allow[r.URL.Path]; ok {
			rw.Header().Set("Allow", m)
			writeError(rw, http.StatusMethodNotAllowed, typeInvalidRequest, "method_not_allowed", "",
				fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, m))
			return
		}
		writeError(rw, http.StatusNotFound, typeNotFound, "not_found", "",
			fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

// auth checks the bearer key for the endpoint's access class.
func (f *Frontend) auth(a access, next http.HandlerFunc) http.HandlerFunc {
	if a == accessOpen || (len(f.cfg.APIKeys) == 0 && len(f.cfg.AdminKeys) == 0) {
		return next
	}
	return func(rw http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r)
		if !ok && a == accessAdmin && r.URL.Path == "/" {
			key, ok = r.URL.Query().Get("key"), r.URL.Query().Has("key")
		}
		admin := anyKey(f.cfg.AdminKeys, key)
		front := anyKey(f.cfg.APIKeys, key)
		var allowed bool
		switch a {
		case accessFront:
			allowed = len(f.cfg.APIKeys) == 0 || front || admin
		case accessAdmin:
			allowed = admin || (len(f.cfg.AdminKeys) == 0 && (front || len(f.cfg.APIKeys) == 0))
		}
		switch {
		case allowed:
			next(rw, r)
		case ok && front:
			writeError(rw, http.StatusForbidden, typePermission, "admin_key_required", "", "this endpoint needs an admin key")
		default:
			rw.Header().Set("WWW-Authenticate", `Bearer realm="kvrouter"`)
			msg := "missing API key: send Authorization: Bearer <key>"
			if ok {
				msg = "invalid API key"
			}
			writeError(rw, http.StatusUnauthorized, typeAuth, codeInvalidAPIKey, "", msg)
		}
	}
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):]), true
	}
	return "", false
}

func anyKey(keys []string, key string) bool {
	if key == "" {
		return false
	}
	found := 0
	for _, k := range keys {
		found |= subtle.ConstantTimeCompare([]byte(k), []byte(key))
	}
	return found == 1
}

// statusWriter records the status code and forwards Flush via Unwrap.
type statusWriter struct {
	http.ResponseWriter
	status int
	// body, when set, is the request's deadline-guarded body: a response
	// that starts before the body was read to its end closes the
	// connection (see guardedBody).
	body *guardedBody
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if w.body != nil && w.body.http1 && !w.body.done.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// guardedBody is a request body read under Config.BodyReadTimeout: the
// connection's read deadline is set when the request arrives and cleared
// once the body has been read to its end (a long response must not be cut
// by it). A body not read to its end — a stalled client, or a handler that
// answered without reading (401, 404) — keeps the deadline, and the
// response closes the connection: net/http would otherwise drain up to
// 256 KiB of the unread body after the handler with no deadline at all, so
// a client sending a few bytes of a promised 1000 held the connection (and
// its response) forever.
//
// Over HTTP/2 the deadline is the stream's, and a handler that returns
// without reading resets the stream: no connection to close.
type guardedBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	http1 bool
	done  atomic.Bool
}

func (b *guardedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done.Swap(true) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// guardBody puts r's body under the body read timeout; it returns nil
// when there is no body or no timeout.
func (f *Frontend) guardBody(rw http.ResponseWriter, r *http.Request) *guardedBody {
	if f.cfg.BodyReadTimeout <= 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	rc := http.NewResponseController(rw)
	if rc.SetReadDeadline(time.Now().Add(f.cfg.BodyReadTimeout)) != nil {
		return nil
	}
	b := &guardedBody{ReadCloser: r.Body, rc: rc, http1: r.ProtoMajor == 1}
	r.Body = b
	return b
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if fl, ok := w.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts requests by route and status and times them.
func (f *Frontend) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		f.handlers.Add(1)
		defer f.handlers.Done()
		start := f.clock()
		sw := &statusWriter{ResponseWriter: rw, body: f.guardBody(rw, r)}
		// Deferred: a handler aborting its response (http.ErrAbortHandler)
		// is counted too.
		defer func() {
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			f.m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			f.m.duration.WithLabelValues(route).Observe(f.clock().Sub(start).Seconds())
		}()
		next.ServeHTTP(sw, r)
	})
}

// workerName is the directory's name for a worker, or its id.
func (f *Frontend) workerName(id kvevent.WorkerID) string {
	if e, ok := f.dir.Lookup(id); ok && e.Name != "" {
		return e.Name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// newRequestID returns a process-unique request id.
func (f *Frontend) newRequestID() string {
	return f.idPrefix + strconv.FormatUint(f.ids.Add(1), 10)
}
