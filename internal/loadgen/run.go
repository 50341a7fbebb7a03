package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/report"
	"github.com/kvrouter/kvrouter/internal/workload"
)

// Outcome is one run's measurements.
type Outcome struct {
	// Result is the summary row (Policy is the name given to Run).
	Result report.Result
	// TTFTs are the completed requests' TTFTs in ms, for the CDF plot.
	TTFTs []float64
	// Load is the requests in flight per worker over wall time.
	Load report.WorkerLoad
	// Workers names the workers in Result/Load index order (from the
	// X-Kvrouter-Worker header; "server" when absent).
	Workers []string
	// Issued counts the requests sent; Cancelled those cut off by the
	// duration bound (or the caller's context).
	Issued, Cancelled int
	// Errors counts failures by message (at most 20 distinct messages).
	Errors map[string]int
	// Wall is the run's wall time.
	Wall time.Duration
}

type gen struct {
	cfg      Config
	client   *http.Client
	endpoint string
}

type record struct {
	issued time.Duration
	result
}

// Run sends src to the server in cfg and measures every request. name
// labels the result (for example "kvrouter" or a policy). progress may be
// nil. Cancelling ctx stops the run early: the partial outcome is returned
// with ctx's error.
func Run(ctx context.Context, cfg Config, src workload.Source, name string, progress report.Progress) (Outcome, error) {
	if err := cfg.Validate(); err != nil {
		return Outcome{}, err
	}
	tr := &http.Transport{
		Proxy: nil, MaxConnsPerHost: cfg.MaxConns, MaxIdleConns: cfg.MaxConns, MaxIdleConnsPerHost: cfg.MaxConns,
		IdleConnTimeout: 90 * time.Second, DisableCompression: true, ResponseHeaderTimeout: cfg.RequestTimeout,
	}
	defer tr.CloseIdleConnections()
	path := "/v1/completions"
	if cfg.API == APIChat {
		path = "/v1/chat/completions"
	}
	g := &gen{cfg: cfg, client: &http.Client{Transport: tr}, endpoint: strings.TrimRight(cfg.URL, "/") + path}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(runCtx, cfg.Duration)
		defer cancel()
	}
	limit := cfg.Concurrency
	openLoop := limit == 0
	if openLoop {
		limit = src.Concurrency()
	}
	var sem chan struct{}
	if limit > 0 {
		sem = make(chan struct{}, limit)
	}
	var (
		mu   sync.Mutex
		recs []record
		wg   sync.WaitGroup
	)
	start := time.Now()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	issued := 0
loop:
	for cfg.MaxRequests == 0 || issued < cfg.MaxRequests {
		req, ok := src.Next()
		if !ok {
			break
		}
		if openLoop {
			if wait := req.Arrival - time.Since(start); wait > 0 {
				timer.Reset(wait)
				select {
				case <-runCtx.Done():
					timer.Stop()
					break loop
				case <-timer.C:
				}
			}
		}
		if sem != nil {
			select {
			case <-runCtx.Done():
				break loop
			case sem <- struct{}{}:
			}
		}
		if runCtx.Err() != nil {
			if sem != nil {
				<-sem
			}
			break
		}
		issued++
		at := time.Since(start)
		wg.Add(1)
		go func(prompt []uint32, maxTokens int) {
			defer wg.Done()
			res := g.do(runCtx, prompt, maxTokens)
			if res.err != nil && runCtx.Err() != nil && errors.Is(res.err, runCtx.Err()) {
				res.cancelled = true
			}
			if sem != nil {
				<-sem
			}
			mu.Lock()
			recs = append(recs, record{issued: at, result: res})
			if progress != nil && !res.cancelled {
				progress.Add(1)
			}
			mu.Unlock()
		}(req.Prompt, req.OutputLen)
	}
	wg.Wait()
	if progress != nil {
		progress.Finish()
	}
	out := summarize(cfg, name, recs)
	out.Issued, out.Wall = issued, time.Since(start)
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("bench interrupted: %w", err)
	}
	return out, nil
}

// summarize turns the records into an Outcome: workers are indexed in
// name order, records in issue order.
func summarize(cfg Config, name string, recs []record) Outcome {
	slices.SortStableFunc(recs, func(a, b record) int { return int(a.issued - b.issued) })
	idx := map[string]int{}
	var names []string
	for _, r := range recs {
		w := workerName(r.worker)
		if _, ok := idx[w]; !ok && r.err == nil && !r.cancelled {
			idx[w] = 0
			names = append(names, w)
		}
	}
	slices.Sort(names)
	for i, n := range names {
		idx[n] = i
	}
	out := Outcome{Workers: names, Errors: map[string]int{}}
	rec := report.NewRecorder(len(names))
	for _, r := range recs {
		switch {
		case r.cancelled:
			out.Cancelled++
		case r.err != nil:
			rec.Add(report.Record{Worker: -1, Issued: r.issued, Failed: true})
			msg := r.err.Error()
			if len(msg) > 200 {
				msg = msg[:200]
			}
			if _, ok := out.Errors[msg]; ok || len(out.Errors) < 20 {
				out.Errors[msg]++
			}
		default:
			rec.Add(report.Record{Worker: idx[workerName(r.worker)], Issued: r.issued, TTFT: r.ttft, E2E: r.e2e,
				PromptTokens: r.prompt, CachedTokens: r.cached, OutputTokens: r.out})
		}
	}
	out.Result = rec.Result(name, 0)
	out.TTFTs = rec.TTFTs()
	out.Load = inFlight(name, cfg.LoadSampleEvery, names, idx, recs)
	return out
}

func workerName(h string) string {
	if h == "" {
		return "server"
	}
	return h
}

// inFlight samples, every dt, how many completed requests each worker was
// serving (issued at or before the instant and not yet finished), with a
// difference array over the sample instants.
func inFlight(name string, dt time.Duration, names []string, idx map[string]int, recs []record) report.WorkerLoad {
	wl := report.WorkerLoad{Policy: name, Quantity: "requests in flight"}
	var end time.Duration
	for _, r := range recs {
		if r.err == nil && !r.cancelled {
			end = max(end, r.issued+r.e2e)
		}
	}
	if len(names) == 0 {
		return wl
	}
	n := int(end/dt) + 1
	diff := make([][]float64, len(names))
	for i := range diff {
		diff[i] = make([]float64, n+1)
	}
	ceil := func(t time.Duration) int { return int((t + dt - 1) / dt) }
	for _, r := range recs {
		if r.err != nil || r.cancelled {
			continue
		}
		w := idx[workerName(r.worker)]
		a, b := ceil(r.issued), ceil(r.issued+r.e2e)
		if a < b {
			diff[w][min(a, n)]++
			diff[w][min(b, n)]--
		}
	}
	wl.Load = make([][]float64, len(names))
	for w := range names {
		wl.Load[w] = make([]float64, n)
		cur := 0.0
		for i := range n {
			cur += diff[w][i]
			wl.Load[w][i] = cur
		}
	}
	wl.Times = make([]time.Duration, n)
	for i := range n {
		wl.Times[i] = time.Duration(i) * dt
	}
	return wl
}
