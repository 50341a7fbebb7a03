package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// Config describes the simulated fleet.
type Config struct {
	// Workers is the number of engines (one dp rank each). Default 8.
	Workers int
	// Engine configures every engine; its BlockSize is the fleet's.
	// Default mocker.DefaultConfig().
	Engine mocker.Config
	// Router configures the router; Policy is set per run and BlockSize to
	// Engine.BlockSize. Default router.DefaultConfig().
	Router router.Config
	// Approximate simulates workers that publish no KV events (the router's
	// approximate mode). Default false.
	Approximate bool
	// LoadSampleEvery is the virtual interval between per-worker load
	// samples for the load plot. Default 1 s.
	LoadSampleEvery time.Duration
	// Fleet gives workers their own speed, token budget and KV capacity
	// on top of Engine. Default the zero Fleet (every worker as Engine).
	Fleet mocker.Fleet
	// SpeedChanges change the workers' speeds mid-run, in time order.
	// Default none.
	SpeedChanges []SpeedChange
	// PrefillWorkers and DecodeWorkers, when set, split the Workers
	// into prefill and decode engines (pd.go); they must add up to
	// Workers. Default 0 (aggregated).
	PrefillWorkers, DecodeWorkers int
	// BypassTokens skips the prefill hop of a prompt whose uncached part
	// on the best prefill engine is shorter (pd.go). Default 0.
	BypassTokens int
	// Queue, when not nil, makes requests wait in an admission queue
	// while every worker is over its thresholds, instead of being routed
	// (queue.go). Default nil.
	Queue *QueueConfig
}

// DefaultConfig returns 8 default mock engines behind a default router.
func DefaultConfig() Config {
	return Config{Workers: 8, Engine: mocker.DefaultConfig(), Router: router.DefaultConfig(), LoadSampleEvery: time.Second}
}

// ErrConfig wraps configuration failures.
var ErrConfig = errors.New("invalid sim config")

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if c.Workers < 1 || c.Workers > 4096 {
		return fmt.Errorf("%w: workers %d must be in [1, 4096]", ErrConfig, c.Workers)
	}
	if c.LoadSampleEvery <= 0 {
		return fmt.Errorf("%w: load sample interval %v must be positive", ErrConfig, c.LoadSampleEvery)
	}
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("%w: engine: %w", ErrConfig, err)
	}
	if c.Queue != nil {
		if c.PrefillWorkers > 0 {
			return fmt.Errorf("%w: the admission queue is not modelled for a disaggregated fleet", ErrConfig)
		}
		if err := c.Queue.validate(); err != nil {
			return err
		}
	}
	if err := c.validateFleet(); err != nil {
		return err
	}
	return c.validatePD()
}

// Outcome is one policy's run.
type Outcome struct {
	// Result is the summary row.
	Result report.Result
	// TTFTs are every request's TTFT in ms, for the CDF plot.
	TTFTs []float64
	// Load is the per-worker requests in flight over time.
	Load report.WorkerLoad
	// WorkerRequests is how many requests each worker served.
	WorkerRequests []int
	// WorkerPrefillTokens is the uncached prompt tokens each worker
	// computed for the requests it served (report.Recorder.WorkerPrefillTokens).
	WorkerPrefillTokens []int64
	// Duration is the virtual time from the first arrival to the last
	// completion.
	Duration time.Duration
	// TimeModels is the router's fitted time model of each worker at the
	// end (fed from every flight, whatever the policy).
	TimeModels []router.TimeModel
	// PredictionRatio is the geometric mean over requests of the kv-time
	// predicted TTFT of the chosen worker ÷ the TTFT it had (0 under other
	// policies): how well calibrated the time models were.
	PredictionRatio float64
	// Bypassed counts requests of a disaggregated fleet whose prefill hop
	// was skipped; TransferredBlocks the KV blocks sent from prefill to
	// decode engines.
	Bypassed, TransferredBlocks int64
	// Queue is what the admission queue did (zero without one), and each
	// named tenant's TTFTs.
	Queue QueueStats
}

type eventKind uint8

const (
	evArrival eventKind = iota
	evStepEnd
	evSpeedChange // worker is the index in Config.SpeedChanges
	evTransfer    // a disaggregated request's KV reached its decode engine (pd.go)
	evWake        // a release held by staggering looks again (queue.go)
)

type event struct {
	at     time.Duration
	seq    uint64 // insertion order: deterministic ties
	kind   eventKind
	worker int
	id     uint64 // evTransfer's request
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type worker struct {
	eng     *mocker.Engine
	busy    bool
	outputs []mocker.Output
	events  []mocker.Event
}

type flight struct {
	issued   time.Duration
	ttft     time.Duration
	worker   int
	prompt   int
	cached   int
	gotFirst bool
	sent     router.Sample // the chosen row's load at send time, for Observe
	predict  float64       // kv-time's predicted TTFT in seconds (0: none)
	remote   bool          // decoding after a disaggregated prefill
	sentAt   time.Duration // when it was sent (after any wait in the admission queue)
	tenant   string
}

// run is one simulation's state.
type run struct {
	cfg      Config
	src      workload.Source
	rt       *router.Router
	workers  []worker
	q        eventQueue
	seq      uint64
	now      time.Duration
	pending  *workload.Request
	arrival  bool // an arrival event for pending is queued
	flights  map[uint64]*flight
	rec      *report.Recorder
	load     *report.LoadRecorder
	nextLoad time.Duration
	progress report.Progress
	first    time.Duration
	started  bool
	oracle   bool
	logRatio float64 // Σ log(predicted ÷ actual TTFT)
	ratios   int

	pd          map[uint64]*pdFlight // disaggregated requests between hops (pd.go)
	bypassed    int64
	transferred int64    // KV blocks transferred
	wait        *waiting // the admission queue (Config.Queue)
}

// PolicyOracle is a diagnostic policy of the simulator only: it sends each
// request to the worker whose cache (as the exact index sees it) holds its
// longest prefix, ignoring load (ties: fewest requests in flight, then the
// lowest id). It shows how much of the bound separate pools can reach when
// cache affinity is all that matters.
const PolicyOracle = "oracle"

// Run simulates src through the fleet under one routing policy (kv,
// kv-time, round-robin, random or least-loaded). boundHitRatio is copied into the
// result (see Compare). progress may be nil.
func Run(cfg Config, policy string, src workload.Source, boundHitRatio float64, progress report.Progress) (Outcome, error) {
	if err := cfg.Validate(); err != nil {
		return Outcome{}, err
	}
	rcfg := cfg.Router
	rcfg.Policy = policy
	oracle := policy == PolicyOracle
	if oracle {
		rcfg.Policy = "kv" // the router only books; the sim picks the worker
	}
	rcfg.BlockSize = cfg.Engine.BlockSize
	if cfg.PrefillWorkers > 0 {
		// kv-time predicts a decode hop's transfer as the engines model it.
		rcfg.KVTime.TransferBandwidth, rcfg.KVTime.KVBytesPerToken = cfg.Engine.KVTransferBandwidth, cfg.Engine.KVBytesPerToken
	}
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		return Outcome{}, fmt.Errorf("building index: %w", err)
	}
	r := &run{cfg: cfg, src: src, flights: map[uint64]*flight{}, pd: map[uint64]*pdFlight{}, rec: report.NewRecorder(cfg.Workers),
		load: report.NewLoadRecorder(policy, "requests in flight"), progress: progress, oracle: oracle}
	r.rt, err = router.New(rcfg, router.NewSerial(x), func() time.Time { return time.Unix(0, 0).Add(r.now) }, nil)
	if err != nil {
		return Outcome{}, fmt.Errorf("building router: %w", err)
	}
	mode := router.Exact
	if cfg.Approximate {
		mode = router.Approximate
	}
	for i := range cfg.Workers {
		ec := cfg.EngineConfig(i)
		eng, err := mocker.NewEngine(ec)
		if err != nil {
			return Outcome{}, fmt.Errorf("building engine: %w", err)
		}
		r.workers = append(r.workers, worker{eng: eng})
		if err := r.rt.AddWorker(router.WorkerInfo{ID: kvevent.WorkerID(i), BlockSize: ec.BlockSize,
			KVCapacityBlocks: ec.NumGPUBlocks, MaxBatchedTokens: ec.MaxNumBatchedTokens, Mode: mode,
			Role: cfg.role(i)}); err != nil {
			return Outcome{}, fmt.Errorf("adding worker: %w", err)
		}
	}
	if r.wait, err = newWaiting(cfg.Queue); err != nil {
		return Outcome{}, err
	}
	for i, ch := range cfg.SpeedChanges {
		r.push(ch.At, evSpeedChange, i)
	}
	if err := r.loop(); err != nil {
		return Outcome{}, err
	}
	if progress != nil {
		progress.Finish()
	}
	var pre int64
	for _, w := range r.workers {
		pre += int64(w.eng.Stats().Preemptions)
	}
	r.rec.AddPreemptions(pre)
	res := r.rec.Result(policy, boundHitRatio)
	o := Outcome{Result: res, TTFTs: r.rec.TTFTs(), Load: r.load.WorkerLoad(), Duration: r.now - r.first,
		WorkerRequests: r.rec.WorkerRequests(), WorkerPrefillTokens: r.rec.WorkerPrefillTokens(), TimeModels: r.rt.TimeModels(), Queue: r.wait.stats(),
		Bypassed: r.bypassed, TransferredBlocks: r.transferred}
	if r.ratios > 0 {
		o.PredictionRatio = math.Exp(r.logRatio / float64(r.ratios))
	}
	return o, nil
}

func (r *run) push(at time.Duration, kind eventKind, w int) {
	r.seq++
	heap.Push(&r.q, event{at: at, seq: r.seq, kind: kind, worker: w})
}

func (r *run) pushTransfer(at time.Duration, id uint64) {
	r.seq++
	heap.Push(&r.q, event{at: at, seq: r.seq, kind: evTransfer, id: id})
}

func (r *run) loop() error {
	r.pull()
	r.tryIssue()
	for r.q.Len() > 0 {
		ev := heap.Pop(&r.q).(event)
		if ev.kind == evSpeedChange && r.pending == nil && len(r.flights) == 0 && r.wait.len() == 0 {
			continue // the run is over: a later change must not stretch it
		}
		r.sampleUntil(ev.at)
		r.now = ev.at
		r.expireWaiting()
		switch ev.kind {
		case evArrival:
			r.arrival = false
		case evStepEnd:
			if err := r.stepEnd(ev.worker); err != nil {
				return err
			}
		case evSpeedChange:
			if err := r.applySpeedChange(r.cfg.SpeedChanges[ev.worker]); err != nil {
				return err
			}
		case evTransfer:
			r.transferDone(ev.id)
		case evWake:
			r.wake()
		}
		r.tryIssue()
	}
	if len(r.flights) > 0 || r.pending != nil || r.wait.len() > 0 {
		return fmt.Errorf("simulation stalled at %v with %d requests in flight, %d waiting", r.now, len(r.flights), r.wait.len())
	}
	r.sampleUntil(r.now)
	return nil
}

func (r *run) pull() {
	if req, ok := r.src.Next(); ok {
		r.pending = &req
	} else {
		r.pending = nil
	}
}

// tryIssue issues every pending request whose time has come while the
// source's concurrency allows, and queues the next arrival.
func (r *run) tryIssue() {
	c := r.src.Concurrency()
	for r.pending != nil && r.pending.Arrival <= r.now && (c == 0 || len(r.flights) < c) {
		r.issue(*r.pending)
		r.pull()
	}
	if r.pending != nil && r.pending.Arrival > r.now && !r.arrival {
		r.arrival = true
		r.push(r.pending.Arrival, evArrival, 0)
	}
}

func (r *run) issue(req workload.Request) {
	if !r.started {
		r.started, r.first = true, r.now
	}
	if r.cfg.PrefillWorkers > 0 && r.issuePD(req) {
		return
	}
	if r.wait.q != nil {
		r.admit(req)
		return
	}
	d, err := r.route(req)
	if err != nil {
		r.rec.Add(report.Record{Worker: -1, Issued: r.now, Failed: true})
		r.done(1)
		return
	}
	r.dispatch(req, d, r.now)
}

// route asks the router for req's worker and books it there.
func (r *run) route(req workload.Request) (router.Decision, error) { return r.routeAmong(req, nil) }

// routeAmong is route among the workers allowed (nil: every one).
func (r *run) routeAmong(req workload.Request, allowed []kvevent.WorkerID) (router.Decision, error) {
	rreq := router.Request{ID: strconv.Itoa(req.ID), Tokens: req.Prompt, ExpectedOutputTokens: req.OutputLen, AllowedWorkers: allowed}
	if r.oracle {
		if w, ok := r.oracleWorker(rreq); ok {
			rreq.PinnedWorker, rreq.HasPinned = w, true
		}
	}
	return r.rt.Route(rreq)
}

// dispatch sends a routed request to its engine; arrived is when it
// arrived (TTFT and end-to-end latency count from there).
func (r *run) dispatch(req workload.Request, d router.Decision, arrived time.Duration) {
	id := uint64(req.ID)
	sid := strconv.FormatUint(id, 10)
	w := int(d.Worker.ID)
	if err := r.workers[w].eng.Add(mocker.Request{ID: id, Tokens: req.Prompt, MaxTokens: req.OutputLen}); err != nil {
		r.rt.Free(sid)
		r.wait.done(req.Tenant)
		r.rec.Add(report.Record{Worker: w, Issued: arrived, Failed: true})
		r.done(1)
		return
	}
	row := d.ChosenRow()
	r.flights[id] = &flight{issued: arrived, worker: w, prompt: len(req.Prompt), sent: router.Sample{
		QueuedPrefillTokens: row.ActivePrefillTokens, QueuedPrefillElapsed: row.PrefillElapsed,
		ActiveRequests: row.ActiveRequests, ActiveBlocks: row.ActiveBlocks},
		predict: row.Prediction.TTFT, sentAt: r.now, tenant: req.Tenant}
	if !r.workers[w].busy {
		r.startStep(w)
	}
}

// oracleWorker picks the longest cached prefix, ties by fewest requests in
// flight on the engine, then by the lowest id.
func (r *run) oracleWorker(req router.Request) (kvevent.WorkerID, bool) {
	d, err := r.rt.Plan(req)
	if err != nil {
		return 0, false
	}
	best, bestOverlap, bestLoad := -1, -1, 0
	for _, c := range d.Candidates {
		w := int(c.Worker.ID)
		s := r.workers[w].eng.Stats()
		load := s.Running + s.Waiting
		if c.Overlap.Device > bestOverlap || (c.Overlap.Device == bestOverlap && (load < bestLoad || (load == bestLoad && w < best))) {
			best, bestOverlap, bestLoad = w, c.Overlap.Device, load
		}
	}
	return kvevent.WorkerID(best), best >= 0
}

func (r *run) done(n int) {
	if r.progress != nil {
		r.progress.Add(n)
	}
}

func (r *run) startStep(w int) {
	wk := &r.workers[w]
	if wk.eng.Idle() {
		wk.busy = false
		return
	}
	res := wk.eng.Step()
	wk.outputs = append(wk.outputs[:0], res.Outputs...)
	wk.events = wk.events[:0]
	if !r.cfg.Approximate {
		for _, e := range res.Events {
			e.Hashes = append([]uint64(nil), e.Hashes...)
			e.Tokens = append([]uint32(nil), e.Tokens...)
			wk.events = append(wk.events, e)
		}
	}
	dur := res.Duration
	if res.Scheduled == 0 || dur <= 0 {
		dur = max(dur, time.Millisecond) // nothing admissible yet: do not spin
	}
	wk.busy = true
	r.push(r.now+dur, evStepEnd, w)
}

func (r *run) stepEnd(w int) error {
	wk := &r.workers[w]
	for _, e := range wk.events {
		if err := r.rt.ApplyEvent(e.KVEvent(workerRank(w))); err != nil {
			return fmt.Errorf("applying worker %d event: %w", w, err)
		}
	}
	for _, o := range wk.outputs {
		if r.cfg.role(w) == router.RolePrefill {
			r.prefillDone(w, o)
			continue
		}
		f := r.flights[o.ID]
		if f == nil {
			continue
		}
		sid := strconv.FormatUint(o.ID, 10)
		if o.First && !f.gotFirst {
			f.gotFirst, f.ttft = true, r.now-f.issued
			if !f.remote {
				f.cached = o.CachedTokens
			}
			r.rt.MarkPrefillCompleted(sid)
			r.wait.first(o.ID, f.tenant, f.ttft, f.sentAt-f.issued)
			// The time model sees the engine's part: from the send, not
			// from an arrival that waited in the admission queue.
			engine := r.now - f.sentAt
			r.observe(w, f, engine, 0)
			if f.predict > 0 && engine > 0 {
				r.logRatio += math.Log(f.predict / engine.Seconds())
				r.ratios++
			}
		}
		if o.Finished {
			var itl time.Duration
			if o.Generated > 1 {
				itl = (r.now - f.issued - f.ttft) / time.Duration(o.Generated-1)
			}
			f.sent.Duration = r.now - f.sentAt
			r.observe(w, f, 0, itl)
			r.rt.Free(sid)
			r.wait.done(f.tenant)
			r.rec.Add(report.Record{Worker: w, Issued: f.issued, TTFT: f.ttft, E2E: r.now - f.issued,
				PromptTokens: f.prompt, CachedTokens: f.cached, OutputTokens: o.Generated})
			delete(r.flights, o.ID)
			r.done(1)
		}
	}
	r.releaseWaiting()
	r.startStep(w)
	return nil
}

// observe feeds the router's time model of worker w what the front door
// would see of flight f: its prompt, the engine's cached tokens, the load
// booked at send time, and a TTFT or a mean inter-token time.
func (r *run) observe(w int, f *flight, ttft, itl time.Duration) {
	if f.remote {
		// A decode hop's first token waited for the transfer, not for a
		// prefill there: the decode model learns from it, the prefill
		// model does not (as at the front door).
		ttft = 0
		if itl <= 0 {
			return
		}
	}
	s := f.sent
	s.PromptTokens, s.CachedTokens, s.TTFT, s.ITL = f.prompt, f.cached, ttft, itl
	r.rt.Observe(kvevent.WorkerRank{ID: kvevent.WorkerID(w)}, s, time.Unix(0, 0).Add(r.now))
}

// sampleUntil records load samples for every sample instant up to t.
func (r *run) sampleUntil(t time.Duration) {
	if !r.started {
		return
	}
	if r.nextLoad < r.first {
		r.nextLoad = r.first
	}
	for r.nextLoad <= t {
		per := make([]float64, len(r.workers))
		for i, w := range r.workers {
			s := w.eng.Stats()
			per[i] = float64(s.Running + s.Waiting)
		}
		r.load.Sample(r.nextLoad, per)
		r.nextLoad += r.cfg.LoadSampleEvery
	}
}

// Compare runs every policy on the workload open builds (called once per
// policy and once for the bound), computing the bound as one shared LRU
// pool of the fleet's total blocks (Config.TotalBlocks). newProgress may be nil.
func Compare(cfg Config, policies []string, open func() (workload.Source, error),
	newProgress func(policy string, total int) report.Progress) ([]Outcome, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	src, err := open()
	if err != nil {
		return nil, err
	}
	b, err := workload.ComputeBound(src, cfg.Engine.BlockSize, cfg.TotalBlocks())
	if err != nil {
		return nil, err
	}
	var out []Outcome
	for _, p := range policies {
		src, err := open()
		if err != nil {
			return out, err
		}
		var prog report.Progress
		if newProgress != nil {
			prog = newProgress(p, src.Len())
		}
		o, err := Run(cfg, p, src, b.HitRatio(), prog)
		if err != nil {
			return out, fmt.Errorf("policy %s: %w", p, err)
		}
		out = append(out, o)
	}
	return out, nil
}
