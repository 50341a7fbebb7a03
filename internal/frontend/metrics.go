package frontend

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the front door's Prometheus collectors.
type metrics struct {
	requests        *prometheus.CounterVec   // route, status
	duration        *prometheus.HistogramVec // route
	inflight        prometheus.Gauge
	ttft            prometheus.Histogram
	itl             prometheus.Histogram
	decision        prometheus.Histogram
	overlap         prometheus.Histogram
	promptTokens    prometheus.Counter
	retries         *prometheus.CounterVec   // reason
	cachedError     *prometheus.HistogramVec // worker
	cachedPred      *prometheus.CounterVec   // worker
	cachedActual    *prometheus.CounterVec   // worker
	promptByWorker  *prometheus.CounterVec   // worker
	lifecycle       *prometheus.CounterVec   // op, result
	streamTimeouts  *prometheus.CounterVec   // worker, stage
	tokenizeRefused prometheus.Counter
}

func newMetrics(reg *prometheus.Registry, f *Frontend) *metrics {
	const ns, sub = "kvrouter", "frontend"
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "request_duration_seconds", Help: "Time from request to the end of the response, by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "inflight_requests", Help: "Completion requests being served."}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "time_to_first_token_seconds", Help: "Time from request to the first token (first response byte when not streaming).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "inter_token_latency_seconds", Help: "Time between streamed token events.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		decision: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "routing_decision_seconds", Help: "Time spent in the router core per decision (hashing, index query, scoring, booking).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20)}),
		overlap: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "overlap_blocks", Help: "Device overlap in blocks of the chosen worker per decision.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "prompt_tokens_total", Help: "Prompt tokens routed."}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retries_total", Help: "Requests retried on another worker, by reason (connect, status_5xx, read)."}, []string{"reason"}),
		cachedError: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "cached_tokens_error", Help: "Actual cached prompt tokens reported by the worker minus the router's prediction (overlap blocks x block size); negative means the router over-predicted.",
			Buckets: []float64{-16384, -4096, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 4096, 16384}}, []string{"worker"}),
		cachedPred: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "predicted_cached_tokens_total", Help: "Cached prompt tokens the router predicted, for responses that reported usage."}, []string{"worker"}),
		cachedActual: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "actual_cached_tokens_total", Help: "Cached prompt tokens workers reported in usage.prompt_tokens_details.cached_tokens."}, []string{"worker"}),
		promptByWorker: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "usage_prompt_tokens_total", Help: "Prompt tokens of responses that reported cached tokens (the denominator of the hit ratio)."}, []string{"worker"}),
		lifecycle: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "lifecycle_calls_total", Help: "Router lifecycle calls by operation and result (ok, unknown)."}, []string{"op", "result"}),
		streamTimeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "worker_stream_timeouts_total", Help: "Requests ended because their worker sent nothing for the stream idle timeout, by worker and stage (headers, first_byte, mid_stream)."}, []string{"worker", "stage"}),
		tokenizeRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "tokenize_queue_refused_total", Help: "Large prompts that found no tokenization slot within the queue timeout (answered 503) or whose client left while waiting."}),
	}
	reg.MustRegister(m.requests, m.duration, m.inflight, m.ttft, m.itl, m.decision, m.overlap,
		m.promptTokens, m.retries, m.cachedError, m.cachedPred, m.cachedActual, m.promptByWorker,
		m.lifecycle, m.streamTimeouts, m.tokenizeRefused, &loadCollector{f: f})
	return m
}

func (m *metrics) lifecycleCall(op string, ok bool) {
	r := "ok"
	if !ok {
		r = "unknown"
	}
	m.lifecycle.WithLabelValues(op, r).Inc()
}

// loadCollector reads the router's per-worker load at scrape time.
type loadCollector struct{ f *Frontend }

var (
	loadReqDesc = prometheus.NewDesc("kvrouter_frontend_worker_active_requests",
		"Requests running on a worker rank as the router tracks them.", []string{"worker", "dp_rank"}, nil)
	loadPrefillDesc = prometheus.NewDesc("kvrouter_frontend_worker_active_prefill_tokens",
		"Prompt tokens still to prefill on a worker rank.", []string{"worker", "dp_rank"}, nil)
	loadBlocksDesc = prometheus.NewDesc("kvrouter_frontend_worker_active_blocks",
		"KV blocks held by running requests on a worker rank (shared blocks once).", []string{"worker", "dp_rank"}, nil)
)

// Describe implements prometheus.Collector.
func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- loadReqDesc
	ch <- loadPrefillDesc
	ch <- loadBlocksDesc
}

// Collect implements prometheus.Collector.
func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	for _, l := range c.f.router.Loads() {
		name := c.f.workerName(l.Worker.ID)
		rank := strconv.FormatUint(uint64(l.Worker.Rank), 10)
		ch <- prometheus.MustNewConstMetric(loadReqDesc, prometheus.GaugeValue, float64(l.ActiveRequests), name, rank)
		ch <- prometheus.MustNewConstMetric(loadPrefillDesc, prometheus.GaugeValue, float64(l.ActivePrefillTokens), name, rank)
		ch <- prometheus.MustNewConstMetric(loadBlocksDesc, prometheus.GaugeValue, l.ActiveBlocks, name, rank)
	}
}
