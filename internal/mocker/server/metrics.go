package server

import (
	"strconv"

	"github.com/kvrouter/kvrouter/internal/mocker"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the worker's Prometheus collectors, named as vLLM names them,
// labelled by model_name and engine (the dp rank) as vLLM labels them.
type metrics struct {
	running, waiting, usage *prometheus.GaugeVec
	queries, hits           *prometheus.CounterVec
	preemptions             *prometheus.CounterVec
	promptTokens, genTokens *prometheus.CounterVec
	success                 *prometheus.CounterVec
	ttft, itl, e2e          *prometheus.HistogramVec
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

func newMetrics(reg *prometheus.Registry) *metrics {
	l := []string{"model_name", "engine"}
	m := &metrics{
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:num_requests_running",
			Help: "Number of requests in model execution batches."}, l),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting",
			Help: "Number of requests waiting to be processed."}, l),
		usage: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:kv_cache_usage_perc",
			Help: "KV-cache usage. 1 means 100 percent usage."}, l),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total",
			Help: "Prefix cache queries, in terms of number of queried tokens."}, l),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total",
			Help: "Prefix cache hits, in terms of number of cached tokens."}, l),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:num_preemptions_total",
			Help: "Cumulative number of preemptions from the engine."}, l),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total",
			Help: "Number of prefill tokens processed."}, l),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:generation_tokens_total",
			Help: "Number of generation tokens processed."}, l),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total",
			Help: "Count of successfully processed requests."}, append(l, "finished_reason")),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:time_to_first_token_seconds",
			Help: "Histogram of time to first token in seconds.", Buckets: latencyBuckets}, l),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:inter_token_latency_seconds",
			Help: "Histogram of inter-token latency in seconds.", Buckets: latencyBuckets}, l),
		e2e: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds",
			Help: "Histogram of e2e request latency in seconds.", Buckets: latencyBuckets}, l),
	}
	reg.MustRegister(m.running, m.waiting, m.usage, m.queries, m.hits, m.preemptions, m.promptTokens,
		m.genTokens, m.success, m.ttft, m.itl, m.e2e)
	return m
}

// rankMetrics are the collectors of one rank, labels bound.
type rankMetrics struct {
	running, waiting, usage       prometheus.Gauge
	queries, hits, preemptions    prometheus.Counter
	promptTokens, genTokens, succ prometheus.Counter
	ttft, itl, e2e                prometheus.Observer
	last                          mocker.Stats
}

func (m *metrics) forRank(model string, rank int) *rankMetrics {
	l := prometheus.Labels{"model_name": model, "engine": strconv.Itoa(rank)}
	return &rankMetrics{
		running: m.running.With(l), waiting: m.waiting.With(l), usage: m.usage.With(l),
		queries: m.queries.With(l), hits: m.hits.With(l), preemptions: m.preemptions.With(l),
		promptTokens: m.promptTokens.With(l), genTokens: m.genTokens.With(l),
		succ: m.success.MustCurryWith(l).WithLabelValues("length"),
		ttft: m.ttft.With(l), itl: m.itl.With(l), e2e: m.e2e.With(l),
	}
}

// update sets the gauges and advances the counters from an engine snapshot.
func (r *rankMetrics) update(s mocker.Stats) {
	r.running.Set(float64(s.Running))
	r.waiting.Set(float64(s.Waiting))
	r.usage.Set(s.Usage())
	r.queries.Add(float64(s.PrefixQueries - r.last.PrefixQueries))
	r.hits.Add(float64(s.PrefixHits - r.last.PrefixHits))
	r.preemptions.Add(float64(s.Preemptions - r.last.Preemptions))
	r.last = s
}
