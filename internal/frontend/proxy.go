package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Response headers the front door adds.
const (
	// HeaderWorker names the worker that served the request.
	HeaderWorker = "X-Kvrouter-Worker"
	// HeaderOverlapBlocks is the chosen worker's predicted device overlap
	// in blocks.
	HeaderOverlapBlocks = "X-Kvrouter-Overlap-Blocks"
)

func (f *Frontend) handleCompletions(rw http.ResponseWriter, r *http.Request) {
	f.serveOpenAI(rw, r, false)
}

func (f *Frontend) handleChat(rw http.ResponseWriter, r *http.Request) {
	f.serveOpenAI(rw, r, true)
}

// readBody reads the request body within MaxBodyBytes; it answers 413 or
// 400 itself and returns false on failure.
func (f *Frontend) readBody(rw http.ResponseWriter, r *http.Request) ([]byte, bool) {
	tooLarge := func() {
		writeError(rw, http.StatusRequestEntityTooLarge, typeInvalidRequest, codeTooLarge, "",
			fmt.Sprintf("request body larger than %d bytes", f.cfg.MaxBodyBytes))
	}
	if r.ContentLength > f.cfg.MaxBodyBytes {
		tooLarge()
		return nil, false
	}
	// The body is read under BodyReadTimeout's deadline (instrument's
	// guardedBody); an error answer closes the connection.
	buf := bytes.NewBuffer(make([]byte, 0, max(min(r.ContentLength, f.cfg.MaxBodyBytes), 512)+1))
	_, err := buf.ReadFrom(http.MaxBytesReader(rw, r.Body, f.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge()
			return nil, false
		}
		if r.ProtoMajor == 1 {
			rw.Header().Set("Connection", "close")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(rw, http.StatusRequestTimeout, typeInvalidRequest, codeBodyTimeout, "",
				fmt.Sprintf("request body not received within %v", f.cfg.BodyReadTimeout))
			return nil, false
		}
		writeError(rw, http.StatusBadRequest, typeInvalidRequest, "", "", "reading request body: "+err.Error())
		return nil, false
	}
	return buf.Bytes(), true
}

// tokenSlot takes a tokenization slot for a large body (largePrompt and
// over) and returns its release; it answers 503 itself (false) when none
// came free within TokenizeQueueTimeout, or nothing when the client left.
func (f *Frontend) tokenSlot(rw http.ResponseWriter, r *http.Request, bodyLen int) (func(), bool) {
	if bodyLen < largePrompt {
		return func() {}, true
	}
	release, err := f.slots.acquire(r.Context())
	if err != nil {
		f.m.tokenizeRefused.Inc()
		if errors.Is(err, errTokenizerBusy) {
			writeRetryAfter(rw, f.cfg.RetryAfter)
			writeError(rw, http.StatusServiceUnavailable, typeOverloaded, codeTokenizerBusy, "",
				fmt.Sprintf("%d large prompts are being tokenized and this one waited %v for its turn; retry later",
					cap(f.slots.ch), f.cfg.TokenizeQueueTimeout))
		}
		return nil, false
	}
	return release, true
}

// writeParseError maps a parsing error to its status, in the router's
// OpenAI error shape: a field error names its field; otherwise param is
// the prompt's field (prompt, messages or tokens).
func writeParseError(rw http.ResponseWriter, err error, param string) {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		writeError(rw, http.StatusBadRequest, typeInvalidRequest, fe.code, fe.param, fe.msg)
	case errors.Is(err, ErrUnknownModel):
		writeError(rw, http.StatusNotFound, typeNotFound, codeModelNotFound, "model", clientMessage(err, ErrUnknownModel))
	case errors.Is(err, ErrPromptTooLong):
		writeError(rw, http.StatusRequestEntityTooLarge, typeInvalidRequest, codeContextLength, param, clientMessage(err, ErrPromptTooLong))
	default:
		writeError(rw, http.StatusBadRequest, typeInvalidRequest, "", param, clientMessage(err, ErrBadRequest))
	}
}

// exchange is one client request on its way through the proxy.
type exchange struct {
	start    time.Time
	endpoint string
	path     string
	body     []byte
	tokens   []uint32
	expected int
	stream   bool // the client asked for an SSE stream
	adm      admitted
	session  string // the client's session id, for affinity
	// salt is the request's cache_salt (router.Request.Namespace).
	salt string
	// model is the request's pool ("" the default model); approx says its
	// tokens are textTokens (a model without a tokenizer); lora is the
	// LoRA adapter its model names ("" none).
	model  string
	lora   string
	approx bool
	// abort: the client's response was committed and cut short; its
	// connection is aborted so that it cannot take a truncated body for
	// a whole one.
	abort bool
	rec   record
}

// serveOpenAI serves /v1/chat/completions (chat) and /v1/completions:
// it judges and tokenizes the request, then routes and proxies it.
func (f *Frontend) serveOpenAI(rw http.ResponseWriter, r *http.Request, chat bool) {
	start := f.clock()
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	param := "prompt"
	if chat {
		param = "messages"
	}
	fields, ok := f.judgeFields(rw, body, param)
	if !ok {
		return
	}
	p, ok := f.openAIPrompt(rw, r, &fields, len(body), chat, param)
	if !ok {
		return
	}
	fwd := body
	if !chat && f.cfg.ForwardTokenIDs && !p.fromIDs && !p.approx && p.batch == 1 {
		var err error
		if fwd, err = withTokenIDs(body, p.tokens); err != nil {
			writeParseError(rw, err, "")
			return
		}
	}
	endpoint := "completions"
	if chat {
		endpoint = "chat"
	}
	ex := &exchange{start: start, endpoint: endpoint, path: r.URL.Path, body: fwd, tokens: p.tokens,
		expected: fields.expectedOutput(), salt: salt(fields.CacheSalt), model: p.model, lora: f.loraOf(fields.Model), approx: p.approx, stream: fields.Stream}
	ex.rec = record{Time: start, Endpoint: endpoint, InputTokens: len(p.tokens), Actual: -1}
	f.classify(r, ex, &fields)
	f.serveExchange(rw, r, ex)
}

// judgeFields scans the body's fields and judges those the router can
// before the prompt is tokenized, routed and booked; false when it
// answered the client.
func (f *Frontend) judgeFields(rw http.ResponseWriter, body []byte, param string) (requestFields, bool) {
	fields, err := parseFields(body)
	if err != nil {
		if errors.Is(err, errSyntax) {
			writeError(rw, http.StatusBadRequest, typeInvalidRequest, codeInvalidJSON, "", "invalid JSON body: "+clientMessage(err, errSyntax))
		} else {
			writeParseError(rw, err, param)
		}
		return fields, false
	}
	if _, _, err := f.parserFor(fields.Model); err != nil {
		writeParseError(rw, err, param)
		return fields, false
	}
	if err := f.parser.checkFields(&fields); err != nil {
		writeParseError(rw, err, param)
		return fields, false
	}
	return fields, true
}

// openAIPrompt turns the request's messages or prompt into token ids (in
// a tokenizing slot unless the prompt is ids already); false when it
// answered the client.
func (f *Frontend) openAIPrompt(rw http.ResponseWriter, r *http.Request, fields *requestFields, size int, chat bool, param string) (prompt, bool) {
	var p prompt
	pp, model, err := f.parserFor(fields.Model)
	if err != nil {
		writeParseError(rw, err, param)
		return p, false
	}
	if chat || fields.promptIDs == nil {
		release, ok := f.tokenSlot(rw, r, size)
		if !ok {
			return p, false
		}
		if chat {
			p, err = pp.chatPrompt(fields)
		} else {
			p, err = pp.completionPrompt(fields.Prompt)
		}
		release()
	} else {
		p, err = pp.idsPrompt(fields.promptIDs)
	}
	p.model, p.approx = model, !p.fromIDs && (pp.approxText() || (chat && pp.approxChat()))
	if err != nil {
		writeParseError(rw, err, param)
		return p, false
	}
	return p, true
}

// serveExchange forwards ex, counted in flight, and records it.
func (f *Frontend) serveExchange(rw http.ResponseWriter, r *http.Request, ex *exchange) {
	f.m.inflight.Inc()
	defer f.m.inflight.Dec()
	f.m.promptTokens.Add(float64(len(ex.tokens)))
	f.forward(rw, r, ex)
	f.endAdmission(ex)
	ex.rec.Duration = f.clock().Sub(ex.start)
	f.finish(ex.rec)
	if ex.abort {
		// net/http's own way to end a response in error: the connection
		// is reset instead of the body being closed as if complete.
		panic(http.ErrAbortHandler)
	}
}

// withTokenIDs replaces the body's "prompt" with token ids.
func withTokenIDs(body []byte, ids []uint32) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("request body must be a JSON object: %w", ErrBadRequest)
	}
	b := make([]byte, 0, len(ids)*7+2)
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	m["prompt"] = append(b, ']')
	return json.Marshal(m)
}

// failure is why an attempt did not produce a response, kept to answer
// the client when every attempt failed.
type failure struct {
	reason string // connect, status_5xx, read, unknown_worker
	worker string
	err    error
	status int
	header http.Header
	body   []byte
}

// forward routes the request and proxies it, retrying other workers when
// one fails before its first response byte.
func (f *Frontend) forward(rw http.ResponseWriter, r *http.Request, ex *exchange) {
	if f.disaggregated() {
		f.forwardPD(rw, r, ex) // pd.go
		return
	}
	var excluded []kvevent.WorkerID
	var last *failure
	// The decision's candidate rows are only read by decisionView: their
	// storage goes back to the pool when forward returns.
	expl, _ := f.explanations.Get().(*[]router.Explanation)
	if expl == nil {
		expl = new([]router.Explanation)
	}
	defer f.explanations.Put(expl)
	for attempt := 0; attempt <= f.cfg.MaxRetries; attempt++ {
		req := f.routerRequest(ex, f.newRequestID(), *expl)
		if len(excluded) > 0 {
			req.AllowedWorkers = f.allowedExcept(excluded, req.AllowedWorkers)
			if len(req.AllowedWorkers) == 0 {
				break
			}
		}
		d, err := f.routeAttempt(r, ex, req, attempt)
		*expl = d.Candidates
		if err != nil {
			if last != nil {
				break // report the worker failure rather than "no candidate left"
			}
			ex.rec.Decision = f.recordDecision(d, false)
			ex.rec.Outcome, ex.rec.Status = "refused: "+err.Error(), f.writeRouteError(rw, err, nil)
			return
		}
		excluded = append(excluded, d.Worker.ID) // for the next attempts, if any
		entry, ok := f.dir.Lookup(d.Worker.ID)
		if !ok || entry.URL == "" {
			f.free(req.ID)
			last = &failure{reason: "unknown_worker", worker: ex.rec.Worker, err: errors.New("worker has no URL in the directory")}
			f.m.retries.WithLabelValues(last.reason).Inc()
			continue
		}
		if last = f.attempt(rw, r, ex, req.ID, d, entry); last == nil {
			return
		}
		if !f.failedBeforeFirstByte(r, ex, req.ID, d, last, attempt) {
			return
		}
	}
	f.answerFailed(rw, ex, last)
}

// route asks the router for attempt's decision on req and records it in
// ex.
func (f *Frontend) route(ex *exchange, req router.Request, attempt int) (router.Decision, error) {
	t0 := f.clock()
	d, err := f.router.Route(req)
	f.m.decision.Observe(f.clock().Sub(t0).Seconds())
	ex.rec.RequestID = req.ID
	ex.rec.Attempts = attempt + 1
	if err != nil {
		return d, err
	}
	f.m.overlap.Observe(float64(d.OverlapBlocks))
	ex.rec.Decision = f.recordDecision(d, true)
	ex.rec.Worker = f.workerName(d.Worker.ID)
	ex.rec.OverlapBlocks = d.OverlapBlocks
	ex.rec.Predicted = d.OverlapBlocks * f.blockSize
	return d, nil
}

// failedBeforeFirstByte logs and reports the failure of attempt on d's
// worker; false when the client went away (nothing left to retry for).
func (f *Frontend) failedBeforeFirstByte(r *http.Request, ex *exchange, id string, d router.Decision, fail *failure, attempt int) bool {
	if r.Context().Err() != nil {
		ex.rec.Outcome, ex.rec.Status = "client disconnected", 499
		return false
	}
	retry := attempt < f.cfg.MaxRetries
	f.log.Warn("worker failed before the first byte", "worker", fail.worker, "reason", fail.reason,
		"err", fail.err, "request_id", id, "attempt", attempt+1, "retrying", retry)
	if fr, ok := f.dir.(FailureReporter); ok {
		fr.WorkerFailed(d.Worker.ID, fail.reason, fail.err)
	}
	if retry {
		f.m.retries.WithLabelValues(fail.reason).Inc()
	}
	return true
}

// answerFailed answers a request whose every attempt failed: the last
// worker's kept 5xx answer, or 502 saying why.
func (f *Frontend) answerFailed(rw http.ResponseWriter, ex *exchange, last *failure) {
	if last == nil {
		// Every worker was excluded before any attempt (cannot happen on
		// the first pass); answer as "no worker".
		ex.rec.Outcome, ex.rec.Status = "no worker left", f.writeRouteError(rw, router.ErrNoCandidates, nil)
		return
	}
	ex.rec.Outcome = fmt.Sprintf("worker %s failed (%s): %v", last.worker, last.reason, last.err)
	if last.status >= 500 && last.body != nil {
		copyHeader(rw.Header(), last.header)
		rw.Header().Del("Content-Length") // the kept body may be cut short
		rw.Header().Set(HeaderWorker, last.worker)
		rw.WriteHeader(last.status)
		_, _ = rw.Write(last.body)
		ex.rec.Status = last.status
		return
	}
	ex.rec.Status = http.StatusBadGateway
	writeError(rw, http.StatusBadGateway, typeUpstream, codeWorkerFailed, "",
		fmt.Sprintf("worker %s failed before responding (%s): %v", last.worker, last.reason, last.err))
}

// writeRouteError answers a router refusal and returns the status.
func (f *Frontend) writeRouteError(rw http.ResponseWriter, err error, extra map[string]any) int {
	if status, ok := f.writeQueueError(rw, err); ok {
		return status
	}
	status, typ, code := http.StatusInternalServerError, typeServer, ""
	switch {
	case errors.Is(err, router.ErrPinnedBusy):
		status, typ, code = http.StatusServiceUnavailable, typeOverloaded, codePinnedBusy
	case errors.Is(err, router.ErrAllBusy):
		status, typ, code = http.StatusServiceUnavailable, typeOverloaded, codeOverloaded
	case errors.Is(err, router.ErrNoCandidates):
		status, typ, code = http.StatusServiceUnavailable, typeOverloaded, codeNoWorker
	case errors.Is(err, router.ErrRequest):
		status, typ = http.StatusBadRequest, typeInvalidRequest
	}
	if status == http.StatusServiceUnavailable {
		writeRetryAfter(rw, f.cfg.RetryAfter)
	}
	// The router's error names the request's internal id and the
	// scheduler's steps; the client gets the reason.
	msg := err.Error()
	if errors.Is(err, router.ErrAllBusy) {
		msg = router.ErrAllBusy.Error() + " (over their busy thresholds); retry later"
	}
	if pe := (*router.PinnedBusyError)(nil); errors.As(err, &pe) {
		msg = f.pinnedBusyMessage(pe)
	}
	if errors.Is(err, router.ErrNoCandidates) {
		msg = "no eligible worker: " + f.noWorkerReason() + "; see /v1/workers"
		// No worker while the router is still starting (NATS start-up,
		// registry not read yet) says so: the client and the operator
		// see why, not only that there is nobody to serve.
		if rerr := f.ready(); rerr != nil {
			msg += " (router not ready: " + rerr.Error() + ")"
		}
	}
	if extra == nil {
		writeError(rw, status, typ, code, "", msg)
		return status
	}
	e := apiErrorInfo{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	extra["error"] = e
	writeJSON(rw, status, extra)
	return status
}

// noWorkerReason says why no worker is eligible, from the fleet's worker
// states: "1 worker refused: block size 64 ≠ 16; 2 workers down:
// connection refused". Workers in a routable state that the router has
// marked down count as down.
func (f *Frontend) noWorkerReason() string {
	infos, down := f.router.Workers()
	downByID := make(map[kvevent.WorkerID]bool, len(infos))
	for i, w := range infos {
		downByID[w.ID] = down[i]
	}
	list := f.dir.List()
	if len(list) == 0 {
		return "no workers are known"
	}
	groups := groupStates(list, downByID)
	// Refused and down workers first: they are the likely answer.
	slices.SortStableFunc(groups, func(a, b *stateGroup) int { return stateOrder(a.state) - stateOrder(b.state) })
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, g.String())
	}
	return strings.Join(parts, "; ")
}

// stateGroup counts the workers in one state for one reason.
type stateGroup struct {
	state, reason string
	n             int
}

// String reads "2 workers down: connection refused".
func (g *stateGroup) String() string {
	p := fmt.Sprintf("%d worker", g.n)
	if g.n != 1 {
		p += "s"
	}
	p += " " + g.state
	if g.reason != "" {
		p += ": " + g.reason
	}
	return p
}

// groupStates groups the directory's workers by state and reason, in
// the order each group first appears; downByID is the router's view
// (whether it marked a worker down; absent: not in its table).
func groupStates(list []WorkerEntry, downByID map[kvevent.WorkerID]bool) []*stateGroup {
	var groups []*stateGroup
	byKey := map[[2]string]*stateGroup{}
	for _, e := range list {
		state, reason := strings.ToLower(e.Status.State.String()), e.Status.Reason
		for _, sentinel := range []error{fleet.ErrBlockSizeMismatch, fleet.ErrHashContractMismatch} {
			reason = strings.TrimPrefix(reason, sentinel.Error()+": ")
		}
		switch isDown, known := downByID[e.ID]; {
		case e.Status.State.Routable() && known && isDown:
			state, reason = "down", "marked down by the router"
		case e.Status.State.Routable() && !known:
			state, reason = "not routable", "not in the router's worker table yet"
		}
		k := [2]string{state, reason}
		g := byKey[k]
		if g == nil {
			g = &stateGroup{state: state, reason: reason}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.n++
	}
	return groups
}

// stateOrder puts refused workers first, then down ones, then the rest.
func stateOrder(state string) int {
	switch state {
	case "refused":
		return 0
	case "down":
		return 1
	}
	return 2
}

// allowedExcept lists the router's workers (those of within, when it is
// not empty) minus the excluded ones.
func (f *Frontend) allowedExcept(excluded, within []kvevent.WorkerID) []kvevent.WorkerID {
	infos, down := f.router.Workers()
	out := make([]kvevent.WorkerID, 0, len(infos))
	for i, w := range infos {
		if !down[i] && !slices.Contains(excluded, w.ID) && (len(within) == 0 || slices.Contains(within, w.ID)) {
			out = append(out, w.ID)
		}
	}
	return out
}

func (f *Frontend) free(id string) {
	f.m.lifecycleCall("free", f.router.Free(id))
	f.kick()
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// hopHeaders are not copied between connections.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		if !hopHeaders[k] {
			dst[k] = vs
		}
	}
}

// attempt sends the request to one worker and, once the worker's first
// response byte arrives, streams the response to the client. It returns
// nil when the client got a response (or left), or the failure when the
// worker failed before its first byte and another worker may be tried.
// The booking is freed either way.
func (f *Frontend) attempt(rw http.ResponseWriter, r *http.Request, ex *exchange, id string, d router.Decision, entry WorkerEntry) *failure {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	a := &try{f: f, rw: rw, r: r, ex: ex, id: id, d: d, idle: newIdleTimer(f.cfg.StreamIdleTimeout, cancel), sentAt: f.clock()}
	defer a.idle.disarm()
	defer a.free()
	resp, fl := a.send(ctx, entry)
	if resp == nil {
		return fl
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		if resp.StatusCode == http.StatusNotFound {
			f.adapterMissing(d.Worker.ID, ex.lora)
		}
		return a.workerError(resp)
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	n, rerr := a.read(resp.Body, buf)
	if n == 0 && rerr != nil && !errors.Is(rerr, io.EOF) {
		return a.noFirstByte(rerr)
	}
	// Committed: from here the client gets this worker's response.
	a.commit(resp)
	defer a.clearWriteDeadline()
	ok, rerr := a.relay(resp.Body, buf, n, rerr)
	if !ok || !a.end(rerr, resp.StatusCode) {
		return nil
	}
	a.free()
	if a.capture && a.captured != nil {
		a.tr.usage(a.captured)
	}
	f.accuracy(ex, a.tr)
	a.observe()
	return nil
}

// try is one attempt at one worker: the request on its way there, the
// idle timer that cancels it when the worker goes silent, its booking,
// and, once committed, the response being relayed to the client.
type try struct {
	f     *Frontend
	rw    http.ResponseWriter
	r     *http.Request
	ex    *exchange
	id    string // the booking's request id
	d     router.Decision
	idle  *idleTimer
	freed bool
	// sentAt is when the attempt began, the origin of its TTFT.
	sentAt time.Time

	// Set by commit.
	rc       *http.ResponseController
	ok2xx    bool // the worker answered 2xx
	sse      bool // ... with an SSE stream
	tr       *progress
	capture  bool   // a 2xx body that is not a stream is kept for its usage
	captured []byte // ... up to UsageCaptureBytes
}

func (a *try) fail(reason string, err error) *failure {
	return &failure{reason: reason, worker: a.ex.rec.Worker, err: err}
}

// free ends the booking, once.
func (a *try) free() {
	if !a.freed {
		a.freed = true
		a.f.free(a.id)
	}
}

// stalled answers 504 for a worker that went silent at stage, before the
// client was sent anything.
func (a *try) stalled(stage string) { a.f.stalledBeforeCommit(a.rw, a.ex, a.id, a.d, stage) }

// send sends the request to the worker and waits for its response headers
// (within the idle timeout for a stream). A nil response comes with the
// failure to retry, or with none when the worker stalled (the client got
// 504).
func (a *try) send(ctx context.Context, entry WorkerEntry) (*http.Response, *failure) {
	up, err := a.upstreamRequest(ctx, entry)
	if err != nil {
		return nil, a.fail("connect", err)
	}
	if a.ex.stream {
		a.idle.arm() // a worker sends a stream's headers at once
	}
	resp, err := a.f.client.Do(up)
	a.idle.disarm()
	if err != nil {
		if a.idle.expired() {
			a.stalled("headers")
			return nil, nil
		}
		return nil, a.fail("connect", err)
	}
	return resp, nil
}

// upstreamRequest is the request to the worker: the (possibly rewritten)
// body, the client's Accept, the booking's id and, for a worker serving
// several dp ranks behind one URL, the chosen rank.
func (a *try) upstreamRequest(ctx context.Context, entry WorkerEntry) (*http.Request, error) {
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(entry.URL, "/")+a.ex.path, bytes.NewReader(a.ex.body))
	if err != nil {
		return nil, err
	}
	up.Header.Set("Content-Type", "application/json")
	if accept := a.r.Header.Get("Accept"); accept != "" {
		up.Header.Set("Accept", accept)
	}
	up.Header.Set("X-Request-Id", a.id)
	if entry.SendDPRank {
		up.Header.Set("X-Data-Parallel-Rank", strconv.FormatUint(uint64(a.d.Worker.Rank), 10))
	}
	return up, nil
}

// workerError handles a worker's error status before the client was sent
// anything: a 5xx is a failure (its body kept, to answer with if no other
// worker does better); a 4xx, a client error the router could not judge,
// is relayed in the router's error shape.
func (a *try) workerError(resp *http.Response) *failure {
	a.idle.arm()
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a.idle.disarm()
	if resp.StatusCode >= 500 {
		fl := a.fail("status_5xx", fmt.Errorf("status %d", resp.StatusCode))
		fl.status, fl.header, fl.body = resp.StatusCode, resp.Header.Clone(), b
		return fl
	}
	if rerr != nil && a.idle.expired() {
		a.stalled("first_byte")
		return nil
	}
	a.f.relayClientError(a.rw, a.ex, resp, b)
	return nil
}

// read reads the next bytes of the worker's body within the idle timeout.
func (a *try) read(body io.Reader, buf []byte) (int, error) {
	a.idle.arm()
	n, err := readSome(body, buf)
	a.idle.disarm()
	return n, err
}

// noFirstByte handles a worker whose body broke before its first byte: a
// stall is answered 504 (nil), anything else is a failure to retry.
func (a *try) noFirstByte(err error) *failure {
	if a.idle.expired() {
		a.stalled("first_byte")
		return nil
	}
	return a.fail("read", err)
}

// commit sends the client the worker's status and headers, with the
// router's own, and prepares the relay: the response's kind, its progress,
// the usage capture, and WriteTimeout's first deadline (each write must
// reach the client within it).
func (a *try) commit(resp *http.Response) {
	h := a.rw.Header()
	copyHeader(h, resp.Header)
	h.Set(HeaderWorker, a.ex.rec.Worker)
	h.Set(HeaderOverlapBlocks, strconv.Itoa(a.d.OverlapBlocks))
	a.rc = http.NewResponseController(a.rw)
	if a.f.cfg.WriteTimeout > 0 {
		_ = a.rc.SetWriteDeadline(time.Now().Add(a.f.cfg.WriteTimeout))
	}
	a.rw.WriteHeader(resp.StatusCode)
	a.ex.rec.Status = resp.StatusCode
	a.ok2xx = resp.StatusCode < 300
	a.sse = a.ok2xx && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	a.tr = &progress{f: a.f, id: a.id, trackOutput: a.f.router.Config().Sequences.TrackOutputBlocks}
	a.capture = a.ok2xx && !a.sse && a.f.cfg.UsageCaptureBytes > 0
}

// clearWriteDeadline lifts commit's write deadline at the end, so that a
// kept-alive connection's next response is not cut.
func (a *try) clearWriteDeadline() {
	if a.f.cfg.WriteTimeout > 0 {
		_ = a.rc.SetWriteDeadline(time.Time{})
	}
}

// relay streams the worker's body to the client, starting with the n
// bytes already read, until a read error (io.EOF at the body's end),
// which it returns. It returns false when the client went away or could
// not keep up (recorded as 499).
func (a *try) relay(body io.Reader, buf []byte, n int, rerr error) (bool, error) {
	first := true
	for {
		if n > 0 {
			if !a.deliver(buf[:n], first) {
				return false, rerr
			}
			first = false
		}
		if rerr != nil {
			return true, rerr
		}
		n, rerr = a.read(body, buf)
	}
}

// deliver passes one chunk of the worker's body to the client: the
// progress sees it first (SSE events, or the first byte of a body that is
// not a stream as its first token), a body kept for its usage grows, and
// the chunk is written and flushed at once. It returns false when the
// client went away or could not keep up (recorded).
func (a *try) deliver(chunk []byte, first bool) bool {
	switch {
	case a.sse:
		a.tr.feed(chunk, a.ex)
	case first && a.ok2xx:
		a.tr.firstToken(a.ex)
	}
	if a.capture {
		if len(a.captured)+len(chunk) <= a.f.cfg.UsageCaptureBytes {
			a.captured = append(a.captured, chunk...)
		} else {
			a.capture, a.captured = false, nil
		}
	}
	if a.f.cfg.WriteTimeout > 0 {
		_ = a.rc.SetWriteDeadline(time.Now().Add(a.f.cfg.WriteTimeout))
	}
	if _, err := a.rw.Write(chunk); err != nil {
		a.ex.rec.Outcome, a.ex.rec.Status = "client disconnected", 499
		return false
	}
	if err := a.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		a.ex.rec.Outcome, a.ex.rec.Status = "client too slow or gone: "+err.Error(), 499
		return false
	}
	return true
}

// end records how the worker's response ended, rerr being the read error
// that stopped the relay, and tells a streaming client in-band when the
// worker stalled or broke mid-stream (a non-streaming client's connection
// is aborted after a stall). It returns false when the client left first.
func (a *try) end(rerr error, status int) bool {
	rec := &a.ex.rec
	switch {
	case errors.Is(rerr, io.EOF):
		rec.Outcome = "ok"
		if !a.ok2xx {
			rec.Outcome = "worker answered " + strconv.Itoa(status)
		}
	case a.idle.expired():
		msg := a.f.streamTimedOut(a.ex, a.id, a.d, "mid_stream")
		rec.Outcome, rec.Status = msg, http.StatusGatewayTimeout
		if !a.sse {
			a.ex.abort = true
			break
		}
		code := codeWorkerTimeout
		a.sseError(apiErrorInfo{Message: msg, Type: typeUpstream, Code: &code})
	case a.r.Context().Err() != nil:
		rec.Outcome, rec.Status = "client disconnected", 499
		return false
	default:
		rec.Outcome = "worker failed mid-response: " + rerr.Error()
		if a.sse {
			// A non-streaming client sees a truncated body.
			a.sseError(apiErrorInfo{Message: "worker failed mid-stream: " + rerr.Error(), Type: typeUpstream})
		}
	}
	return true
}

// sseError ends a stream with an error event.
func (a *try) sseError(e apiErrorInfo) {
	b, _ := marshal(apiError{Error: e})
	_, _ = a.rw.Write([]byte("data: " + string(b) + "\n\n"))
	_ = a.rc.Flush()
}

// relayClientError answers a worker's 4xx in the router's OpenAI error
// shape (vLLM's own has a numeric code and its exception's name as type),
// keeping the worker's message and param; a body that is not a JSON error
// passes through as it is.
func (f *Frontend) relayClientError(rw http.ResponseWriter, ex *exchange, resp *http.Response, body []byte) {
	var we struct {
		Error *struct {
			Message string          `json:"message"`
			Param   json.RawMessage `json:"param"`
		} `json:"error"`
		Message *string `json:"message"` // vLLM before 0.6: the error object at top level
	}
	ex.rec.Status = resp.StatusCode
	ex.rec.Outcome = "worker answered " + strconv.Itoa(resp.StatusCode)
	rw.Header().Set(HeaderWorker, ex.rec.Worker)
	msg, param, ok := "", "", false
	if json.Unmarshal(body, &we) == nil {
		switch {
		case we.Error != nil && we.Error.Message != "":
			msg, ok = we.Error.Message, true
			_ = json.Unmarshal(we.Error.Param, &param) // a string, or nothing
		case we.Message != nil && *we.Message != "":
			msg, ok = *we.Message, true
		}
	}
	if !ok {
		copyHeader(rw.Header(), resp.Header)
		rw.Header().Del("Content-Length") // the kept body may be cut short
		rw.WriteHeader(resp.StatusCode)
		_, _ = rw.Write(body)
		return
	}
	typ, code := typeInvalidRequest, ""
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		typ = typeAuth
	case http.StatusForbidden:
		typ = typePermission
	case http.StatusNotFound:
		typ = typeNotFound
	case http.StatusRequestEntityTooLarge:
		code = codeTooLarge
	}
	if strings.Contains(msg, "maximum context length") {
		code = codeContextLength
	}
	writeError(rw, resp.StatusCode, typ, code, param, msg)
}

// stalledBeforeCommit answers 504 worker_timeout for a worker that went
// silent before the client was sent anything (not retried: the worker may
// be running the request, and the client has waited the timeout already).
func (f *Frontend) stalledBeforeCommit(rw http.ResponseWriter, ex *exchange, id string, d router.Decision, stage string) {
	msg := f.streamTimedOut(ex, id, d, stage)
	rw.Header().Set(HeaderWorker, ex.rec.Worker)
	writeError(rw, http.StatusGatewayTimeout, typeUpstream, codeWorkerTimeout, "", msg)
	ex.rec.Outcome, ex.rec.Status = msg, http.StatusGatewayTimeout
}

// streamTimedOut counts and logs a stream idle timeout and returns the
// message the client is given.
func (f *Frontend) streamTimedOut(ex *exchange, id string, d router.Decision, stage string) string {
	what := map[string]string{"headers": "no response headers", "first_byte": "no first byte after its headers",
		"mid_stream": "nothing more mid-response"}[stage]
	msg := fmt.Sprintf("worker %s sent %s for %v (stream idle timeout)", ex.rec.Worker, what, f.cfg.StreamIdleTimeout)
	f.m.streamTimeouts.WithLabelValues(ex.rec.Worker, stage).Inc()
	f.log.Warn("worker stream idle timeout: request ended, booking freed", "worker", ex.rec.Worker, "request_id", id,
		"stage", stage, "timeout", f.cfg.StreamIdleTimeout)
	if fr, ok := f.dir.(FailureReporter); ok {
		fr.WorkerFailed(d.Worker.ID, "stream_idle_timeout", errors.New(msg))
	}
	return msg
}

// readSome reads until it gets at least one byte or an error.
func readSome(r io.Reader, buf []byte) (int, error) {
	for range 100 {
		n, err := r.Read(buf)
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.ErrNoProgress
}

// accuracy exports predicted versus actual cached tokens.
func (f *Frontend) accuracy(ex *exchange, tr *progress) {
	if !tr.haveUsage {
		return
	}
	ex.rec.Actual = tr.cached
	w := ex.rec.Worker
	f.m.cachedError.WithLabelValues(w).Observe(float64(tr.cached - ex.rec.Predicted))
	f.m.cachedPred.WithLabelValues(w).Add(float64(ex.rec.Predicted))
	f.m.cachedActual.WithLabelValues(w).Add(float64(tr.cached))
	prompt := tr.promptTokens
	if prompt == 0 {
		prompt = ex.rec.InputTokens
	}
	f.m.promptByWorker.WithLabelValues(w).Add(float64(prompt))
	f.mu.Lock()
	f.totals.UsageRequests++
	f.totals.UsagePrompt += int64(prompt)
	f.totals.Actual += int64(tr.cached)
	f.mu.Unlock()
}

// finish records a finished request for the status page.
func (f *Frontend) finish(rec record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recent.add(rec)
	f.reqs.add(rec.Time)
	f.totals.Requests++
	// A failure is the router's or a worker's (5xx, or no status): a
	// client's own error (4xx, 499 for a client that left) is not.
	if rec.Status >= 500 || rec.Status == 0 {
		f.totals.Failed++
	}
	f.totals.PromptTokens += int64(rec.InputTokens)
	f.totals.Predicted += int64(rec.Predicted)
}

// progress follows a response for the router lifecycle and the metrics:
// the first token, the generated count, inter-token gaps and usage.
type progress struct {
	f            *Frontend
	id           string
	trackOutput  bool
	started      bool
	lastToken    time.Time
	firstAt      time.Time
	generated    int
	line         []byte
	haveUsage    bool
	cached       int
	promptTokens int
}

func (t *progress) firstToken(ex *exchange) {
	now := t.f.clock()
	t.started, t.lastToken, t.firstAt = true, now, now
	t.f.m.ttft.Observe(now.Sub(ex.start).Seconds())
	t.f.m.lifecycleCall("mark_prefill_completed", t.f.router.MarkPrefillCompleted(t.id))
	if t.f.gate != nil {
		t.f.gate.finished(ex.adm.key, t.id)
	}
	t.f.kick()
}

// feed scans SSE bytes for complete "data:" lines.
func (t *progress) feed(b []byte, ex *exchange) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(t.line) < 1<<20 {
				t.line = append(t.line, b...)
			}
			return
		}
		var line []byte
		if len(t.line) > 0 {
			t.line = append(t.line, b[:i]...)
			line = t.line
		} else {
			line = b[:i]
		}
		t.event(bytes.TrimRight(line, "\r"), ex)
		t.line = t.line[:0]
		b = b[i+1:]
	}
}

var (
	dataPrefix   = []byte("data:")
	doneMarker   = []byte("[DONE]")
	choicesKey   = []byte(`"choices"`)
	emptyChoices = []byte(`"choices":[]`)
	cachedKey    = []byte(`"cached_tokens"`)
)

func (t *progress) event(line []byte, ex *exchange) {
	if !bytes.HasPrefix(line, dataPrefix) {
		return
	}
	p := bytes.TrimSpace(line[len(dataPrefix):])
	if len(p) == 0 || bytes.Equal(p, doneMarker) {
		return
	}
	if bytes.Contains(p, choicesKey) && !bytes.Contains(p, emptyChoices) {
		if !t.started {
			t.firstToken(ex)
		} else {
			now := t.f.clock()
			t.f.m.itl.Observe(now.Sub(t.lastToken).Seconds())
			t.lastToken = now
		}
		t.generated++
		if t.trackOutput && t.generated%max(t.f.blockSize, 1) == 0 {
			t.f.router.SetGenerated(t.id, t.generated)
		}
	}
	if bytes.Contains(p, cachedKey) {
		t.usage(p)
	}
}

// usage reads usage.prompt_tokens_details.cached_tokens from a JSON body.
func (t *progress) usage(b []byte) {
	var v struct {
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails *struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(b, &v) != nil || v.Usage == nil || v.Usage.PromptTokensDetails == nil || v.Usage.PromptTokensDetails.CachedTokens == nil {
		return
	}
	t.haveUsage, t.cached, t.promptTokens = true, *v.Usage.PromptTokensDetails.CachedTokens, v.Usage.PromptTokens
}
