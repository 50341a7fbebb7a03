package report

import (
	"time"
)

// Result is one policy's outcome on one workload: the JSON object `--json`
// prints and one row of the comparison table. Latencies are milliseconds.
type Result struct {
	// Policy names the routing policy (kv, round-robin, random, least-loaded).
	Policy string `json:"policy"`
	// Workload describes the workload (optional, for tables of many runs).
	Workload string `json:"workload,omitempty"`
	// Workers is the fleet size (optional).
	Workers int `json:"workers,omitempty"`
	// Requests is the number of completed requests.
	Requests int `json:"requests"`
	// Failed is the number of requests that ended in an error.
	Failed int `json:"failed"`
	// TTFTP50Ms .. TTFTMeanMs summarise time to first token.
	TTFTP50Ms  float64 `json:"ttft_p50_ms"`
	TTFTP90Ms  float64 `json:"ttft_p90_ms"`
	TTFTP99Ms  float64 `json:"ttft_p99_ms"`
	TTFTMeanMs float64 `json:"ttft_mean_ms"`
	// ITLP50Ms and ITLP99Ms summarise inter-token latency, one value per
	// request: (end-to-end − TTFT) / (output tokens − 1), as AIPerf does;
	// requests with one output token have none.
	ITLP50Ms float64 `json:"itl_p50_ms"`
	ITLP99Ms float64 `json:"itl_p99_ms"`
	// E2EP50Ms and E2EP99Ms summarise end-to-end latency (issue to last token).
	E2EP50Ms float64 `json:"e2e_p50_ms"`
	E2EP99Ms float64 `json:"e2e_p99_ms"`
	// ThroughputTokS is output tokens per second over the span from the
	// first issue to the last completion.
	ThroughputTokS float64 `json:"throughput_tok_s"`
	// HitRatio is prompt tokens served from cache over prompt tokens.
	HitRatio float64 `json:"hit_ratio"`
	// BoundHitRatio is the hit ratio of one shared LRU pool of the fleet's
	// total blocks on the same requests (workload.ComputeBound).
	BoundHitRatio float64 `json:"bound_hit_ratio"`
	// HitRatioOverBound is HitRatio / BoundHitRatio (0 when the bound is 0).
	HitRatioOverBound float64 `json:"hit_ratio_over_bound"`
	// MaxWorkerShare and MinWorkerShare are the busiest and idlest
	// workers' fractions of requests (1/N each when perfectly balanced).
	MaxWorkerShare float64 `json:"max_worker_share"`
	MinWorkerShare float64 `json:"min_worker_share"`
	// Preemptions counts requests the engines preempted for lack of KV
	// blocks.
	Preemptions int64 `json:"preemptions"`
}

// Record is what is known about one finished request.
type Record struct {
	// Worker is the index of the worker that served it, in [0, workers).
	Worker int
	// Issued is when the request was sent, from the start of the run.
	Issued time.Duration
	// TTFT is the time from issue to the first output token.
	TTFT time.Duration
	// E2E is the time from issue to the last output token.
	E2E time.Duration
	// PromptTokens is the prompt length.
	PromptTokens int
	// CachedTokens is how many prompt tokens were served from cache.
	CachedTokens int
	// OutputTokens is the number of tokens generated.
	OutputTokens int
	// Failed marks a request that ended in an error; only Worker and Issued
	// are then meaningful, and it counts in Result.Failed alone.
	Failed bool
}

// Recorder accumulates Records for one policy. The zero value is not
// usable: use NewRecorder. Not safe for concurrent use.
type Recorder struct {
	workers             int
	ttft, itl, e2e      []float64
	perWorker           []int
	perWorkerPrefill    []int64 // uncached prompt tokens of the requests each worker served
	prompt, cached, out int64
	first, last         time.Duration
	any                 bool
	failed              int
	preemptions         int64
}

// NewRecorder returns a recorder for a fleet of workers workers.
func NewRecorder(workers int) *Recorder {
	return &Recorder{workers: workers, perWorker: make([]int, max(workers, 0)), perWorkerPrefill: make([]int64, max(workers, 0))}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Add records one finished request. A worker index outside the fleet is
// counted in the totals but not in the shares.
func (r *Recorder) Add(rec Record) {
	if !r.any || rec.Issued < r.first {
		r.first = rec.Issued
	}
	r.any = true
	if rec.Failed {
		r.failed++
		return
	}
	if rec.Worker >= 0 && rec.Worker < len(r.perWorker) {
		r.perWorker[rec.Worker]++
		r.perWorkerPrefill[rec.Worker] += int64(max(rec.PromptTokens-rec.CachedTokens, 0))
	}
	r.ttft = append(r.ttft, ms(rec.TTFT))
	r.e2e = append(r.e2e, ms(rec.E2E))
	if rec.OutputTokens > 1 {
		r.itl = append(r.itl, ms(rec.E2E-rec.TTFT)/float64(rec.OutputTokens-1))
	}
	r.prompt += int64(rec.PromptTokens)
	r.cached += int64(rec.CachedTokens)
	r.out += int64(rec.OutputTokens)
	r.last = max(r.last, rec.Issued+rec.E2E)
}

// AddPreemptions adds n to the preemption count.
func (r *Recorder) AddPreemptions(n int64) { r.preemptions += n }

// TTFTs returns every recorded TTFT in milliseconds, in record order (the
// slice is the recorder's: do not modify it).
func (r *Recorder) TTFTs() []float64 { return r.ttft }

// WorkerRequests returns the number of requests each worker served.
func (r *Recorder) WorkerRequests() []int { return append([]int(nil), r.perWorker...) }

// WorkerPrefillTokens returns, per worker, the prompt tokens it computed:
// the uncached prompt tokens (prompt less cached) of the requests it
// served. Requests differ in size, so this is the work each worker did
// where WorkerRequests counts the requests.
func (r *Recorder) WorkerPrefillTokens() []int64 { return append([]int64(nil), r.perWorkerPrefill...) }

// Result summarises everything recorded, with the given bound hit ratio.
// Workers is the recorder's fleet size; Workload is left empty.
func (r *Recorder) Result(policy string, boundHitRatio float64) Result {
	ttft, itl, e2e := Summarize(r.ttft), Summarize(r.itl), Summarize(r.e2e)
	res := Result{
		Policy: policy, Requests: len(r.ttft), Failed: r.failed,
		TTFTP50Ms: ttft.P50, TTFTP90Ms: ttft.P90, TTFTP99Ms: ttft.P99, TTFTMeanMs: ttft.Mean,
		ITLP50Ms: itl.P50, ITLP99Ms: itl.P99, E2EP50Ms: e2e.P50, E2EP99Ms: e2e.P99,
		BoundHitRatio: boundHitRatio, Preemptions: r.preemptions, Workers: len(r.perWorker),
	}
	if span := r.last - r.first; span > 0 {
		res.ThroughputTokS = float64(r.out) / span.Seconds()
	}
	if r.prompt > 0 {
		res.HitRatio = float64(r.cached) / float64(r.prompt)
	}
	if boundHitRatio > 0 {
		res.HitRatioOverBound = res.HitRatio / boundHitRatio
	}
	if n := len(r.ttft); n > 0 && len(r.perWorker) > 0 {
		hi, lo := r.perWorker[0], r.perWorker[0]
		for _, c := range r.perWorker {
			hi, lo = max(hi, c), min(lo, c)
		}
		res.MaxWorkerShare = float64(hi) / float64(n)
		res.MinWorkerShare = float64(lo) / float64(n)
	}
	return res
}

// LoadRecorder samples per-worker load over time into a WorkerLoad for
// WriteWorkerLoad. Not safe for concurrent use.
type LoadRecorder struct {
	load WorkerLoad
}

// NewLoadRecorder returns a recorder for the given policy and quantity
// (axis label, e.g. "requests in flight").
func NewLoadRecorder(policy, quantity string) *LoadRecorder {
	return &LoadRecorder{load: WorkerLoad{Policy: policy, Quantity: quantity}}
}

// Sample records every worker's load at time t (values copied). Samples
// must come in time order; a worker missing from a sample counts 0 there.
func (l *LoadRecorder) Sample(t time.Duration, perWorker []float64) {
	for len(l.load.Load) < len(perWorker) {
		l.load.Load = append(l.load.Load, make([]float64, len(l.load.Times)))
	}
	l.load.Times = append(l.load.Times, t)
	for w := range l.load.Load {
		v := 0.0
		if w < len(perWorker) {
			v = perWorker[w]
		}
		l.load.Load[w] = append(l.load.Load[w], v)
	}
}

// WorkerLoad returns the samples so far.
func (l *LoadRecorder) WorkerLoad() WorkerLoad { return l.load }
