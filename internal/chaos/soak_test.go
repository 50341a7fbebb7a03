//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/service"
)

var (
	flagSoakSeconds = flag.Int("soak.seconds", 60, "soak: how long kvrouter bench drives the router (10 under -short)")
	flagSoakClients = flag.Int("soak.clients", 1000, "soak: concurrent streaming clients (200 under -short)")
	flagSoakBin     = flag.String("soak.bin", "", "soak: the kvrouter binary (empty: built from this checkout into a temporary directory)")
)

// soakBinary is -soak.bin, or kvrouter built from this checkout with the
// go command on PATH, into dir; the test is skipped, saying
// why, when there is no go command to build with.
func soakBinary(t *testing.T, dir string) string {
	t.Helper()
	if *flagSoakBin != "" {
		bin, err := filepath.Abs(*flagSoakBin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("-soak.bin: %v", err)
		}
		return bin
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build kvrouter with (%v): give a binary with -soak.bin", err)
	}
	bin := filepath.Join(dir, "kvrouter")
	build := exec.Command(goBin, "build", "-o", bin, "../../cmd/kvrouter")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	t0 := time.Now()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kvrouter: %v\n%s", err, out)
	}
	t.Logf("built %s in %v", bin, time.Since(t0).Round(time.Millisecond))
	return bin
}

// soakFlag is the value of an int flag, or short under -short when the
// flag was not given.
func soakFlag(name string, v *int, short int) int {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	if testing.Short() && !given {
		return short
	}
	return *v
}

// sample is the router process's footprint at one moment.
type sample struct {
	at         time.Duration
	goroutines int
	rssMB      float64
	heapMB     float64
}

// TestSoak: `kvrouter bench online` drives --soak.clients concurrent
// streaming clients for --soak.seconds through one router (this test
// process runs it exactly as `kvrouter serve` does, so the process's RSS
// and goroutines are the router's) to 8 mock workers in a `kvrouter
// mocker` child process, all on loopback. It checks zero errors, bookings
// back to zero, goroutines and RSS flat across the run, and reports the
// router's added latency.
func TestSoak(t *testing.T) {
	bin := soakBinary(t, t.TempDir())
	const workers = 8
	httpBase, evBase, repBase := freeRuns(t, 3, workers)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The fleet: 8 mock workers in one child process.
	mockLog, err := os.Create(filepath.Join(t.TempDir(), "mocker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer mockLog.Close()
	kv := fmt.Sprintf(`{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:%d","replay_endpoint":"tcp://127.0.0.1:%d","topic":"kv-events"}`, evBase, repBase)
	mock := exec.CommandContext(ctx, bin, "mocker", "--num-workers", strconv.Itoa(workers), "--port", strconv.Itoa(httpBase),
		"--block-size", strconv.Itoa(blockSize), "--num-gpu-blocks-override", "16384", "--speedup-ratio", "1",
		"--max-num-seqs", "256", "--kv-events-config", kv)
	mock.Stdout, mock.Stderr = mockLog, mockLog
	if err := mock.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = mock.Wait() }()
	var static []fleet.StaticWorker
	for k := range workers {
		static = append(static, fleet.StaticWorker{Name: fmt.Sprintf("mock-%d", k+1),
			URL: fmt.Sprintf("http://127.0.0.1:%d", httpBase+k), Events: fmt.Sprintf("tcp://127.0.0.1:%d", evBase+k),
			Replay: fmt.Sprintf("tcp://127.0.0.1:%d", repBase+k), Topic: "kv-events", BlockSize: blockSize, KVBlocks: 16384})
		poll.UntilState(t, 30*time.Second, func() (bool, string) {
			resp, err := http.Get(static[k].URL + "/health")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == 200, resp.Status
		}, "mock worker up")
	}

	// The router, as `kvrouter serve --event-plane none --worker ...` runs it.
	cfg := config.Default()
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.EventPlane.Kind = "none"
	cfg.BlockSize = blockSize
	cfg.Workers = static
	svc, err := service.New(cfg, service.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(rctx, ln) }()
	defer func() { rcancel(); <-done }()
	url := "http://" + ln.Addr().String()
	poll.UntilState(t, 30*time.Second, func() (bool, string) {
		err := svc.Ready()
		return err == nil, fmt.Sprint(err)
	}, "router ready")
	runtime.GC()
	base := footprint(0)

	// Sample the router's footprint every second while the bench runs.
	var mu sync.Mutex
	var samples []sample
	start := time.Now()
	stopSampling := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tk.C:
				s := footprint(time.Since(start))
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			}
		}
	})

	secs := soakFlag("soak.seconds", flagSoakSeconds, 10)
	clients := soakFlag("soak.clients", flagSoakClients, 200)
	benchArgs := []string{"bench", "online", "--url", url, "--workload", "prefix-ratio", "--requests", "10000000",
		"--isl", "1024", "--osl", "24", "--prefix-ratio", "0.5", "--num-prefix-prompts", "64",
		"--closed-loop", strconv.Itoa(clients), "--max-conns", strconv.Itoa(clients + 64),
		"--duration", fmt.Sprintf("%ds", secs), "--request-timeout", "60s", "--json"}
	bench := exec.CommandContext(ctx, bin, benchArgs...)
	var stderr strings.Builder
	bench.Stderr = &stderr
	out, err := bench.Output()
	close(stopSampling)
	wg.Wait()
	t.Logf("command: kvrouter %s", strings.Join(benchArgs, " "))
	if err != nil {
		t.Fatalf("kvrouter bench: %v\n%s\n%s", err, out, stderr.String())
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("bench output %q: %v", out, err)
	}
	r := rows[0]
	t.Logf("bench: %d requests, %v failed; TTFT p50 %.1f ms p99 %.1f ms; ITL p50 %.1f ms p99 %.1f ms; e2e p99 %.1f ms; %.0f tok/s",
		int(num(r["requests"])), r["failed"], num(r["ttft_p50_ms"]), num(r["ttft_p99_ms"]), num(r["itl_p50_ms"]), num(r["itl_p99_ms"]),
		num(r["e2e_p99_ms"]), num(r["throughput_tok_s"]))
	if tail := stderr.String(); strings.Contains(tail, "errors:") {
		t.Logf("bench stderr: %s", lastLines(tail, 10))
	}

	// Everything ends: bookings back to zero, goroutines back to base.
	poll.UntilState(t, 30*time.Second, func() (bool, string) {
		for _, l := range svc.Router().Loads() {
			if l.ActiveRequests != 0 {
				return false, fmt.Sprintf("%+v", l)
			}
		}
		return true, ""
	}, "every booking freed")

	// Footprint across the run: steady state is the middle of the run
	// (after the ramp-up, before the drain).
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	for i, s := range samples {
		if i%5 == 0 || i == len(samples)-1 {
			lines = append(lines, fmt.Sprintf("t=%2.0fs goroutines=%d rss=%.0fMB heap=%.0fMB", s.at.Seconds(), s.goroutines, s.rssMB, s.heapMB))
		}
	}
	t.Logf("router footprint (idle before: goroutines=%d rss=%.0fMB heap=%.0fMB):\n  %s", base.goroutines, base.rssMB, base.heapMB,
		strings.Join(lines, "\n  "))
	if len(samples) >= 10 {
		q := len(samples) / 4
		early, late := window4(samples[q:2*q]), window4(samples[2*q:3*q+1])
		t.Logf("steady state: goroutines %.0f → %.0f, RSS %.0f → %.0f MB (2nd vs 3rd quarter means)", early.g, late.g, early.rss, late.rss)
		if late.g > early.g*1.2+50 {
			t.Errorf("goroutines grew across the run: %.0f → %.0f", early.g, late.g)
		}
		if late.rss > early.rss*1.25+32 {
			t.Errorf("RSS grew across the run: %.0f → %.0f MB", early.rss, late.rss)
		}
	}
	if f := num(r["failed"]); f != 0 {
		t.Errorf("%v requests failed (want 0)", f)
	}
	if num(r["requests"]) == 0 {
		t.Error("no request completed")
	}

	// The router's added latency: its TTFT (request in → first token out)
	// against the workers' own TTFT, from their histograms.
	rt := scrapeHist(t, url+"/metrics", "kvrouter_frontend_time_to_first_token_seconds")
	var wt hist
	for _, w := range static {
		wt.merge(scrapeHist(t, w.URL+"/metrics", "vllm:time_to_first_token_seconds"))
	}
	dec := scrapeHist(t, url+"/metrics", "kvrouter_frontend_routing_decision_seconds")
	t.Logf("TTFT at the router: mean %.2f ms p99 %.1f ms; at the workers: mean %.2f ms p99 %.1f ms; overhead: mean %.2f ms, p99 %.1f ms (bucket-interpolated); routing decision p99 %.3f ms",
		rt.mean()*1e3, rt.quantile(0.99)*1e3, wt.mean()*1e3, wt.quantile(0.99)*1e3,
		(rt.mean()-wt.mean())*1e3, (rt.quantile(0.99)-wt.quantile(0.99))*1e3, dec.quantile(0.99)*1e3)
	http.DefaultClient.CloseIdleConnections()
}

type means struct{ g, rss float64 }

func window4(ss []sample) means {
	var m means
	for _, s := range ss {
		m.g += float64(s.goroutines)
		m.rss += s.rssMB
	}
	n := float64(max(len(ss), 1))
	return means{m.g / n, m.rss / n}
}

func footprint(at time.Duration) sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := sample{at: at, goroutines: runtime.NumGoroutine(), heapMB: float64(ms.HeapInuse) / (1 << 20)}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				s.rssMB = kb / 1024
			}
		}
	}
	return s
}

// freeRuns finds n runs of k consecutive free loopback ports.
func freeRuns(t *testing.T, n, k int) (a, b, c int) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var got []int
	for tries := 0; len(got) < n && tries < 1000; tries++ {
		base := 20000 + rng.IntN(30000)
		ok := true
		for p := base; p < base+k && ok; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				continue
			}
			ln.Close()
		}
		for _, g := range got {
			if base < g+k && g < base+k {
				ok = false
			}
		}
		if ok {
			got = append(got, base)
		}
	}
	if len(got) < n {
		t.Fatal("no free port runs")
	}
	return got[0], got[1], got[2]
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// hist is a Prometheus histogram scraped from text exposition.
type hist struct {
	les    []float64
	counts []float64 // cumulative
	sum    float64
	count  float64
}

func (h *hist) merge(o hist) {
	if h.les == nil {
		h.les = append([]float64(nil), o.les...)
		h.counts = make([]float64, len(o.counts))
	}
	for i := range h.counts {
		if i < len(o.counts) {
			h.counts[i] += o.counts[i]
		}
	}
	h.sum += o.sum
	h.count += o.count
}

func (h hist) mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / h.count
}

// quantile interpolates linearly inside the bucket holding q.
func (h hist) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * h.count
	prevLE, prevC := 0.0, 0.0
	for i, le := range h.les {
		if h.counts[i] >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if h.counts[i] == prevC {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevC)/(h.counts[i]-prevC)
		}
		prevLE, prevC = le, h.counts[i]
	}
	return prevLE
}

// scrapeHist sums a histogram's series (all label sets) from /metrics.
func scrapeHist(t *testing.T, url, name string) hist {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("scraping %s: %v", url, err)
		return hist{}
	}
	defer resp.Body.Close()
	byLE := map[float64]float64{}
	var h hist
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name) {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		switch {
		case strings.HasPrefix(l, name+"_bucket"):
			i := strings.Index(l, `le="`)
			if i < 0 {
				continue
			}
			rest := l[i+4:]
			le, err := strconv.ParseFloat(rest[:strings.IndexByte(rest, '"')], 64)
			if err != nil {
				continue
			}
			byLE[le] += v
		case strings.HasPrefix(l, name+"_sum"):
			h.sum += v
		case strings.HasPrefix(l, name+"_count"):
			h.count += v
		}
	}
	for le := range byLE {
		h.les = append(h.les, le)
	}
	sortFloats(h.les)
	for _, le := range h.les {
		h.counts = append(h.counts, byLE[le])
	}
	return h
}

func sortFloats(a []float64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
