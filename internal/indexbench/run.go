package indexbench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/liveindex"
)

// RunConfig tunes the measurements.
type RunConfig struct {
	// Writers is the concurrent index's writer count. Default 4.
	Writers int
	// Queries is how many queries are timed one by one for the latency
	// percentiles (cycling through the stream's requests). Default 20000.
	Queries int
}

// DefaultRunConfig returns the documented defaults.
func DefaultRunConfig() RunConfig { return RunConfig{Writers: 4, Queries: 20000} }

// Result is what Run measured. JSON names are the `--json` output.
type Result struct {
	Requests int `json:"requests"`
	Events   int `json:"events"`
	BlockOps int `json:"block_ops"`
	Workers  int `json:"workers"`

	// BlockOpsPerSec is the apply rate on one writer (plain Index), wall
	// clock, over the whole stream on a fresh index (workers reserved with
	// index.Reserve first, as a router does when they join; the calls are
	// timed too).
	BlockOpsPerSec float64 `json:"block_ops_per_sec"`
	// BlockOpsPerCPUSec is the same rate per second of the applying
	// thread's CPU time (Linux only; 0 elsewhere): the figure that does not
	// depend on how busy the machine is.
	BlockOpsPerCPUSec float64 `json:"block_ops_per_cpu_sec"`
	// SecondHalfBlockOpsPerSec is the apply rate of the same run over the
	// second half of the stream's events only, once the first half has
	// grown the index's tables and filled the workers' caches (removals
	// then free nodes that stores reuse): the steady-state rate of a
	// long-running router, without the fresh index's first-touch page
	// faults. BlockOpsPerSec stays the full-stream figure.
	SecondHalfBlockOpsPerSec float64 `json:"second_half_block_ops_per_sec"`
	// SecondHalfBlockOpsPerCPUSec is SecondHalfBlockOpsPerSec per second
	// of thread CPU time (Linux only).
	SecondHalfBlockOpsPerCPUSec float64 `json:"second_half_block_ops_per_cpu_sec"`
	// LoadAvg1m is the machine's 1-minute load average when the run
	// started (Linux only).
	LoadAvg1m float64 `json:"load_avg_1m"`
	// ConcurrentBlockOpsPerSec is the apply rate through the concurrent
	// index (enqueue to applied, Writers goroutines).
	ConcurrentBlockOpsPerSec float64 `json:"concurrent_block_ops_per_sec"`

	QueryP50us     float64 `json:"query_p50_us"`
	QueryP99us     float64 `json:"query_p99_us"`
	QueryP999us    float64 `json:"query_p999_us"`
	QueryMeanDepth float64 `json:"query_mean_matched_blocks"`
	// QueryCPUMeanus is the mean query cost in thread CPU time (Linux).
	QueryCPUMeanus float64 `json:"query_cpu_mean_us"`
	// Query256* are the same figures for requests cut to 256 blocks.
	Query256P50us     float64 `json:"query256_p50_us"`
	Query256P99us     float64 `json:"query256_p99_us"`
	Query256CPUMeanus float64 `json:"query256_cpu_mean_us"`

	BytesPerEntry float64 `json:"bytes_per_entry"`
	HeapBytes     int64   `json:"heap_bytes"`
	Entries       int     `json:"entries"`
	Nodes         int     `json:"nodes"`

	// Query throughput while the concurrent index applies the whole
	// stream, with 1 and 2 reader goroutines, and the apply rate then.
	QueriesPerSec1Reader  float64 `json:"queries_per_sec_1_reader"`
	QueriesPerSec2Readers float64 `json:"queries_per_sec_2_readers"`
	BlockOpsPerSec1Reader float64 `json:"block_ops_per_sec_1_reader"`
	// QueryWhileWritingP50us and QueryWhileWritingP99us are the wall-clock
	// latencies of the 1-reader run's queries, waiting for the lock
	// included: what a router sees while the writers run flat out.
	QueryWhileWritingP50us float64 `json:"query_while_writing_p50_us"`
	QueryWhileWritingP99us float64 `json:"query_while_writing_p99_us"`
	BlockOpsPerSec2Readers float64 `json:"block_ops_per_sec_2_readers"`
	UnknownRemovals        uint64  `json:"unknown_removals"`
	UnknownParents         uint64  `json:"unknown_parents"`
	Writers                int     `json:"writers"`
	GOMAXPROCS             int     `json:"gomaxprocs"`
}

// Run measures the index on the stream.
func Run(ctx context.Context, s *Stream, cfg RunConfig) (Result, error) {
	if cfg.Writers <= 0 || cfg.Queries <= 0 {
		return Result{}, fmt.Errorf("writers and queries must be positive")
	}
	r := Result{Requests: len(s.Queries), Events: len(s.Events), BlockOps: s.BlockOps,
		Workers: s.Workers, Writers: cfg.Writers, GOMAXPROCS: runtime.GOMAXPROCS(0)}

	// 1. One writer, and memory per entry.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		return r, err
	}
	r.LoadAvg1m = loadAvg()
	runtime.LockOSThread()
	half := len(s.Events) / 2
	cpu0, cpuOK := threadCPU()
	start := time.Now()
	reserve(x, s)
	for i := range s.Events[:half] {
		_ = x.Apply(&s.Events[i])
	}
	mid := time.Now()
	cpuMid, midOK := threadCPU()
	for i := half; i < len(s.Events); i++ {
		_ = x.Apply(&s.Events[i])
	}
	end := time.Now()
	cpu1, endOK := threadCPU()
	runtime.UnlockOSThread()
	secondOps := 0
	for i := half; i < len(s.Events); i++ {
		secondOps += len(s.Events[i].Blocks) + len(s.Events[i].Removed)
	}
	r.BlockOpsPerSec = float64(s.BlockOps) / end.Sub(start).Seconds()
	r.SecondHalfBlockOpsPerSec = float64(secondOps) / end.Sub(mid).Seconds()
	if cpuOK && midOK && endOK && cpu1 > cpuMid && cpuMid >= cpu0 {
		r.BlockOpsPerCPUSec = float64(s.BlockOps) / (cpu1 - cpu0).Seconds()
		r.SecondHalfBlockOpsPerCPUSec = float64(secondOps) / (cpu1 - cpuMid).Seconds()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := x.Stats()
	r.Entries, r.Nodes = st.Entries, st.Nodes
	r.UnknownRemovals, r.UnknownParents = st.UnknownRemoval, st.UnknownParent
	r.HeapBytes = int64(after.HeapAlloc) - int64(before.HeapAlloc)
	if st.Entries > 0 {
		r.BytesPerEntry = float64(r.HeapBytes) / float64(st.Entries)
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}

	// 2. Query latency on the final index, one query at a time: the
	// requests as they are, then cut to their first 256 blocks (the size
	// a design §6 target names).
	var matched int
	r.QueryP50us, r.QueryP99us, r.QueryP999us, r.QueryCPUMeanus, matched = timeQueries(x, s.Queries, cfg.Queries, 0)
	r.QueryMeanDepth = float64(matched) / float64(cfg.Queries)
	r.Query256P50us, r.Query256P99us, _, r.Query256CPUMeanus, _ = timeQueries(x, s.Queries, cfg.Queries, 256)
	runtime.KeepAlive(x)
	x = nil
	if err := ctx.Err(); err != nil {
		return r, err
	}

	// 3. Live index (liveindex), no readers.
	cr, err := concurrentRun(ctx, s, cfg.Writers, 0)
	if err != nil {
		return r, err
	}
	r.ConcurrentBlockOpsPerSec = cr.blockOpsPerSec
	// 4. With 1 and 2 readers querying while the stream is applied.
	if cr, err = concurrentRun(ctx, s, cfg.Writers, 1); err != nil {
		return r, err
	}
	r.BlockOpsPerSec1Reader, r.QueriesPerSec1Reader = cr.blockOpsPerSec, cr.queriesPerSec
	r.QueryWhileWritingP50us, r.QueryWhileWritingP99us = cr.p50us, cr.p99us
	if cr, err = concurrentRun(ctx, s, cfg.Writers, 2); err != nil {
		return r, err
	}
	r.BlockOpsPerSec2Readers, r.QueriesPerSec2Readers = cr.blockOpsPerSec, cr.queriesPerSec
	return r, nil
}

// reserve sizes the index for the stream's workers, as a router does when
// a worker joins (index.Reserve with its KV capacity).
func reserve(x *index.Index, s *Stream) {
	for _, w := range s.Ranks {
		_ = x.Reserve(w, s.WorkerBlocks)
	}
}

// concurrentResult is one concurrentRun's figures.
type concurrentResult struct {
	blockOpsPerSec, queriesPerSec float64
	p50us, p99us                  float64 // query latency, wall clock, lock wait included
}

// concurrentRun applies the stream to a fresh concurrent index and
// returns block-ops/s and, with readers, queries/s and their latency. With
// readers, the first half of the events is applied untimed so that queries
// meet a populated index; readers then query in a loop while the second
// half is applied.
func concurrentRun(ctx context.Context, s *Stream, writers, readers int) (concurrentResult, error) {
	var res concurrentResult
	cfg := liveindex.DefaultConfig()
	cfg.Writers = writers
	c, err := liveindex.New(cfg)
	if err != nil {
		return res, err
	}
	defer c.Close()
	for _, w := range s.Ranks {
		if err := c.Reserve(w, s.WorkerBlocks); err != nil {
			return res, err
		}
	}
	from, ops := 0, s.BlockOps
	if readers > 0 {
		from = len(s.Events) / 2
		for i := range s.Events[:from] {
			if err := c.Apply(s.Events[i]); err != nil {
				return res, err
			}
			ops -= len(s.Events[i].Blocks) + len(s.Events[i].Removed)
		}
		if err := c.Flush(); err != nil {
			return res, err
		}
	}
	var stop atomic.Bool
	var queries atomic.Int64
	var wg sync.WaitGroup
	lats := make([][]time.Duration, readers)
	for k := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sc index.Scores
			lat := make([]time.Duration, 0, 1<<16)
			for i := k; !stop.Load(); i++ {
				t0 := time.Now()
				c.Query(s.Queries[i%len(s.Queries)], &sc)
				lat = append(lat, time.Since(t0))
			}
			queries.Add(int64(len(lat)))
			lats[k] = lat
		}()
	}
	start := time.Now()
	for i := from; i < len(s.Events); i++ {
		if i&1023 == 0 && ctx.Err() != nil {
			break
		}
		if err := c.Apply(s.Events[i]); err != nil {
			break
		}
	}
	_ = c.Flush()
	el := time.Since(start).Seconds()
	stop.Store(true)
	wg.Wait()
	res.blockOpsPerSec, res.queriesPerSec = float64(ops)/el, float64(queries.Load())/el
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	if len(all) > 0 {
		slices.Sort(all)
		pct := func(p float64) float64 {
			return float64(all[min(len(all)-1, int(p*float64(len(all))))].Nanoseconds()) / 1e3
		}
		res.p50us, res.p99us = pct(0.50), pct(0.99)
	}
	return res, ctx.Err()
}

// timeQueries runs n queries (cycling through qs, each cut to limit blocks
// when limit > 0) one at a time and returns wall-clock p50/p99/p99.9 and
// the mean thread CPU time in µs, and the total blocks matched.
func timeQueries(x *index.Index, qs [][]uint64, n, limit int) (p50, p99, p999, cpuMean float64, matched int) {
	lat := make([]time.Duration, n)
	var sc index.Scores
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, ok0 := threadCPU()
	for i := range lat {
		q := qs[i%len(qs)]
		if limit > 0 && len(q) > limit {
			q = q[:limit]
		}
		t0 := time.Now()
		x.Query(q, &sc)
		lat[i] = time.Since(t0)
		for _, v := range sc.List {
			matched += int(v.Blocks)
		}
	}
	if cpu1, ok := threadCPU(); ok && ok0 {
		cpuMean = float64((cpu1 - cpu0).Nanoseconds()) / 1e3 / float64(n)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	return pct(0.50), pct(0.99), pct(0.999), cpuMean, matched
}
