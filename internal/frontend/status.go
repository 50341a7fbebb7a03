package frontend

import (
	_ "embed"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/timeline"
	"github.com/prometheus/client_golang/prometheus"
)

// The status page (GET /): an HTML page that draws itself from the status
// JSON (GET /?format=json) and then fetches that JSON every StatusRefresh
// and patches itself in place, so an opened explanation stays open. Its
// charts come from a timeline of the last chartSpan, one slot per
// chartStep.

//go:embed status.html
var statusHTML string

var statusTmpl = template.Must(template.New("status").Parse(statusHTML))

const (
	// chartStep is the width of one chart sample; the sampler reads the
	// workers' load once per step.
	chartStep = 5 * time.Second
	// chartSpan is how far back the charts go.
	chartSpan = 15 * time.Minute
	// chartMaxWorkers bounds the worker series kept per sample (memory:
	// chartSpan/chartStep samples of at most this many workers).
	chartMaxWorkers = 256
)

// statusJSON is the body of GET /?format=json (documented in docs/api.md).
type statusJSON struct {
	Model             string       `json:"model"`
	BlockSize         int          `json:"block_size"`
	RefreshSeconds    float64      `json:"refresh_seconds"`
	Now               time.Time    `json:"now"`
	Requests          int64        `json:"requests"`
	RatePerSecond     float64      `json:"rate_per_second"`
	Failed            int64        `json:"failed"`
	InFlight          int          `json:"in_flight"`
	PredictedHitRatio *float64     `json:"predicted_hit_ratio"`
	ActualHitRatio    *float64     `json:"actual_hit_ratio"`
	Workers           []workerJSON `json:"workers"`
	Recent            []recentJSON `json:"recent"`
	Charts            chartsJSON   `json:"charts"`

	// WorkersTotal and WorkersByState count every worker; Workers (and
	// the charts) show at most ?workers= of them (see pickWorkers).
	WorkersTotal   int            `json:"workers_total"`
	WorkersByState map[string]int `json:"workers_by_state"`
	// Queue is the admission queue's state (absent when it is off).
	Queue *queueJSON `json:"queue,omitempty"`
}

// recentJSON is one finished request of the status JSON, newest first.
type recentJSON struct {
	Time            time.Time    `json:"time"`
	RequestID       string       `json:"request_id"`
	Endpoint        string       `json:"endpoint"`
	Worker          string       `json:"worker"`
	Status          int          `json:"status"`
	Outcome         string       `json:"outcome"`
	InputTokens     int          `json:"input_tokens"`
	OverlapBlocks   int          `json:"overlap_blocks"`
	PredictedCached int          `json:"predicted_cached_tokens"`
	ActualCached    *int         `json:"actual_cached_tokens"`
	Attempts        int          `json:"attempts"`
	DurationMS      float64      `json:"duration_ms"`
	Decision        decisionJSON `json:"decision"`
}

// chartsJSON is the timeline as parallel arrays: T[i] is the start of
// sample i (Unix ms) and every series has one value per sample, null where
// there is nothing to show (no request with usage, no load reading).
type chartsJSON struct {
	StepSeconds float64           `json:"step_seconds"`
	SpanSeconds float64           `json:"span_seconds"`
	T           []int64           `json:"t"`
	Fleet       fleetChartJSON    `json:"fleet"`
	Workers     []workerChartJSON `json:"workers"`
}

// fleetChartJSON is the fleet-wide series.
type fleetChartJSON struct {
	RequestsPerSecond []*float64 `json:"requests_per_second"`
	TTFTP50MS         []*float64 `json:"ttft_p50_ms"`
	TTFTP99MS         []*float64 `json:"ttft_p99_ms"`
	ErrorRate         []*float64 `json:"error_rate"`
}

// workerChartJSON is one worker's series.
type workerChartJSON struct {
	Worker            string     `json:"worker"`
	WorkerID          uint64     `json:"worker_id"`
	InFlight          []*float64 `json:"in_flight"`
	PrefillTokens     []*float64 `json:"prefill_tokens"`
	ActiveBlocks      []*float64 `json:"active_blocks"`
	UsedBlocks        []*float64 `json:"used_blocks"`
	CapacityBlocks    []*float64 `json:"capacity_blocks"`
	PredictedHitRatio []*float64 `json:"predicted_hit_ratio"`
	ActualHitRatio    []*float64 `json:"actual_hit_ratio"`
}

// statusFeed is what the status page's charts are drawn from: the
// timeline, fed by every finished request (ring.add), every first token
// (ttftTap) and a reading of the workers' load once per chartStep (the
// sampler) and at every status request. Guarded by Frontend.mu.
type statusFeed struct {
	tl *timeline.Timeline
}

// initStatus prepares the status page's timeline and taps the TTFT
// histogram for it; New calls it once the metrics exist.
func (f *Frontend) initStatus() {
	f.recent.feed = &statusFeed{tl: timeline.New(chartStep, chartSpan, chartMaxWorkers)}
	f.m.ttft = ttftTap{Histogram: f.m.ttft, f: f}
}

// ttftTap observes a TTFT into the Prometheus histogram and the timeline.
type ttftTap struct {
	prometheus.Histogram
	f *Frontend
}

// Observe implements prometheus.Observer.
func (t ttftTap) Observe(seconds float64) {
	t.Histogram.Observe(seconds)
	now := t.f.clock()
	t.f.mu.Lock()
	t.f.recent.feed.tl.FirstToken(now, time.Duration(seconds*float64(time.Second)))
	t.f.mu.Unlock()
}

// finished folds a finished request into the timeline.
func (s *statusFeed) finished(rec record) {
	r := timeline.Request{Error: rec.Status >= 500 || rec.Status == 0}
	if id := rec.Decision.WorkerID; id != nil {
		r.Worker, r.Served = *id, true
	}
	if rec.Actual >= 0 {
		r.HasUsage, r.PromptTokens, r.PredictedTokens, r.ActualTokens = true, rec.InputTokens, rec.Predicted, rec.Actual
	}
	s.tl.Finished(rec.Time.Add(rec.Duration), r)
}

// sample reads every worker's load into the timeline at now.
func (f *Frontend) sample(now time.Time, views []workerJSON) {
	gauges := make([]timeline.Gauge, 0, len(views))
	for _, w := range views {
		g := timeline.Gauge{ID: w.WorkerID, Name: w.Worker, CapacityBlocks: w.KVCapacityBlocks}
		for _, r := range w.Ranks {
			g.InFlight += r.ActiveRequests
			g.PrefillTokens += r.ActivePrefillTokens
			g.ActiveBlocks += r.ActiveBlocks
			if r.IndexedBlocks != nil {
				g.UsedBlocks += *r.IndexedBlocks
			}
		}
		if len(w.Ranks) > 1 {
			g.CapacityBlocks *= len(w.Ranks) // the capacity is per rank
		}
		gauges = append(gauges, g)
	}
	f.mu.Lock()
	f.recent.feed.tl.Read(now, gauges)
	f.mu.Unlock()
}

// startSampler reads the workers' load into the timeline once per
// chartStep until the returned stop is called (which waits for it).
func (f *Frontend) startSampler() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(chartStep)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f.sample(f.clock(), f.workerViews())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (f *Frontend) handleStatus(rw http.ResponseWriter, r *http.Request) {
	d := f.statusViewOf(f.clock(), workersLimit(r.URL.Query()))
	rw.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("format") == "json" {
		writeJSON(rw, http.StatusOK, d)
		return
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := statusTmpl.Execute(rw, d); err != nil {
		f.log.Warn("rendering status page", "err", err)
	}
}

// statusViewOf gathers the status JSON at now (reading the workers' load
// into the timeline first, so its last sample is current), showing at most
// limit workers (all when negative).
func (f *Frontend) statusViewOf(now time.Time, limit int) statusJSON {
	views := f.workerViews()
	if views == nil {
		views = []workerJSON{} // the page iterates it
	}
	f.sample(now, views)
	shown := pickWorkers(views, limit)
	d := statusJSON{Model: f.cfg.Model, BlockSize: f.blockSize, RefreshSeconds: f.cfg.StatusRefresh.Seconds(),
		Now: now.UTC(), Workers: shown, WorkersTotal: len(views), WorkersByState: statesOf(views)}
	f.mu.Lock()
	t := f.totals
	d.Requests, d.Failed, d.RatePerSecond = t.Requests, t.Failed, f.reqs.perSecond(now)
	recs := f.recent.list()
	hist := f.recent.feed.tl.History(now)
	f.mu.Unlock()
	d.PredictedHitRatio, d.ActualHitRatio = ratio(t.Predicted, t.PromptTokens), ratio(t.Actual, t.UsagePrompt)
	for _, w := range views {
		for _, r := range w.Ranks {
			d.InFlight += r.ActiveRequests
		}
	}
	d.Recent = make([]recentJSON, 0, len(recs))
	for _, rec := range recs {
		j := recentJSON{Time: rec.Time.UTC(), RequestID: rec.RequestID, Endpoint: rec.Endpoint, Worker: rec.Worker,
			Status: rec.Status, Outcome: rec.Outcome, InputTokens: rec.InputTokens, OverlapBlocks: rec.OverlapBlocks,
			PredictedCached: rec.Predicted, Attempts: rec.Attempts, DurationMS: float64(rec.Duration) / 1e6,
			Decision: rec.Decision}
		if rec.Actual >= 0 {
			a := rec.Actual
			j.ActualCached = &a
		}
		if j.Decision.Candidates == nil {
			j.Decision.Candidates = []candidateJSON{}
		}
		d.Recent = append(d.Recent, j)
	}
	d.Charts = chartsOf(onlyWorkers(hist, shown, len(views)), shown)
	d.Queue = f.queueView(now)
	return d
}

// ratio is a/b, or nil when b is not positive.
func ratio(a, b int64) *float64 {
	if b <= 0 {
		return nil
	}
	v := float64(a) / float64(b)
	return &v
}

func num(v float64) *float64 { return &v }

// chartsOf turns the timeline into parallel series; workers come in the
// order of views (the workers table), then any others by id.
func chartsOf(hist []timeline.Point, views []workerJSON) chartsJSON {
	n := len(hist)
	c := chartsJSON{StepSeconds: chartStep.Seconds(), SpanSeconds: chartSpan.Seconds(), T: make([]int64, n),
		Fleet: fleetChartJSON{RequestsPerSecond: make([]*float64, n), TTFTP50MS: make([]*float64, n),
			TTFTP99MS: make([]*float64, n), ErrorRate: make([]*float64, n)},
		Workers: []workerChartJSON{}}
	order := map[uint64]int{}
	for i, w := range views {
		order[w.WorkerID] = i
	}
	ids := chartWorkers(hist, order)
	byID := make(map[uint64]int, len(ids))
	for i, id := range ids {
		byID[id] = i
		name := ""
		if j, ok := order[id]; ok {
			name = views[j].Worker
		}
		c.Workers = append(c.Workers, workerChartJSON{Worker: name, WorkerID: id,
			InFlight: make([]*float64, n), PrefillTokens: make([]*float64, n), ActiveBlocks: make([]*float64, n),
			UsedBlocks: make([]*float64, n), CapacityBlocks: make([]*float64, n),
			PredictedHitRatio: make([]*float64, n), ActualHitRatio: make([]*float64, n)})
	}
	for i, p := range hist {
		c.T[i] = p.Start.UnixMilli()
		c.Fleet.set(i, p)
		for _, w := range p.Workers {
			c.Workers[byID[w.ID]].set(i, w)
		}
	}
	for i := range c.Workers {
		if c.Workers[i].Worker == "" {
			c.Workers[i].Worker = "worker " + strconv.FormatUint(c.Workers[i].WorkerID, 10)
		}
	}
	return c
}

// chartWorkers lists the ids of the workers in hist: those in order
// first, as ordered, then the others by id.
func chartWorkers(hist []timeline.Point, order map[uint64]int) []uint64 {
	seen := map[uint64]bool{}
	var ids []uint64
	for _, p := range hist {
		for _, w := range p.Workers {
			if !seen[w.ID] {
				seen[w.ID] = true
				ids = append(ids, w.ID)
			}
		}
	}
	slices.SortFunc(ids, func(a, b uint64) int {
		ia, oka := order[a]
		ib, okb := order[b]
		switch {
		case oka && okb:
			return ia - ib
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		case a < b:
			return -1
		case a > b:
			return 1
		}
		return 0
	})
	return ids
}

// set fills sample i of the fleet's series from p.
func (c *fleetChartJSON) set(i int, p timeline.Point) {
	fl := p.Fleet
	// The open sample's rate is over the part of the step gone by, but at
	// least a second of it, so a sample just begun does not spike.
	c.RequestsPerSecond[i] = num(float64(fl.Requests) / max(p.Elapsed.Seconds(), 1))
	if fl.Requests > 0 {
		c.ErrorRate[i] = num(float64(fl.Errors) / float64(fl.Requests))
	}
	if fl.TTFTs > 0 {
		c.TTFTP50MS[i] = num(float64(fl.TTFTP50) / 1e6)
		c.TTFTP99MS[i] = num(float64(fl.TTFTP99) / 1e6)
	}
}

// set fills sample i of the worker's series from w.
func (s *workerChartJSON) set(i int, w timeline.Worker) {
	if s.Worker == "" && w.Name != "" {
		s.Worker = w.Name
	}
	if w.HasGauge {
		s.InFlight[i], s.PrefillTokens[i] = num(float64(w.InFlight)), num(float64(w.PrefillTokens))
		s.ActiveBlocks[i], s.UsedBlocks[i] = num(w.ActiveBlocks), num(float64(w.UsedBlocks))
		if w.CapacityBlocks > 0 {
			s.CapacityBlocks[i] = num(float64(w.CapacityBlocks))
		}
	}
	s.PredictedHitRatio[i] = ratio(w.PredictedTokens, w.PromptTokens)
	s.ActualHitRatio[i] = ratio(w.ActualTokens, w.PromptTokens)
}
