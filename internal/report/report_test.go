package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var update = flag.Bool("update", false, "rewrite golden files")

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestPercentileKnown(t *testing.T) {
	one2ten := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		data []float64
		p    float64
		want float64
	}{
		{one2ten, 50, 5.5}, {one2ten, 90, 9.1}, {one2ten, 99, 9.91}, {one2ten, 0, 1}, {one2ten, 100, 10},
		{one2ten, 25, 3.25}, {one2ten, -5, 1}, {one2ten, 250, 10}, {one2ten, math.NaN(), 0},
		{[]float64{7}, 99, 7}, {nil, 50, 0},
		// numpy.percentile([10, 20, 40, 80], [50, 90]) = [30, 68]
		{[]float64{10, 20, 40, 80}, 50, 30}, {[]float64{10, 20, 40, 80}, 90, 68},
	} {
		if got := Percentile(tc.data, tc.p); !near(got, tc.want) {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tc.data, tc.p, got, tc.want)
		}
	}
	s := Summarize([]float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5, math.NaN()})
	want := Summary{Count: 10, Mean: 5.5, Min: 1, Max: 10, P50: 5.5, P90: 9.1, P99: 9.91}
	if !near(s.P99, want.P99) || !near(s.P90, want.P90) {
		t.Fatalf("summary %+v, want %+v", s, want)
	}
	s.P99, s.P90 = want.P99, want.P90
	if s != want {
		t.Fatalf("summary %+v, want %+v", s, want)
	}
	if Summarize(nil) != (Summary{}) {
		t.Fatal("empty summary not zero")
	}
}

func TestPercentileProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.Float64Range(-1e6, 1e6), 1, 50).Draw(t, "xs")
		slices.Sort(xs)
		p1 := rapid.Float64Range(0, 100).Draw(t, "p1")
		p2 := rapid.Float64Range(p1, 100).Draw(t, "p2")
		a, b := Percentile(xs, p1), Percentile(xs, p2)
		if a < xs[0] || b > xs[len(xs)-1] || a > b+1e-6 {
			t.Fatalf("p%v=%v p%v=%v outside order over %v", p1, a, p2, b, xs)
		}
		// At a rank hit exactly, the value is that order statistic.
		k := rapid.IntRange(0, len(xs)-1).Draw(t, "k")
		if len(xs) > 1 {
			if got := Percentile(xs, 100*float64(k)/float64(len(xs)-1)); math.Abs(got-xs[k]) > 1e-6 {
				t.Fatalf("rank %d: %v, want %v", k, got, xs[k])
			}
		}
	})
}

// TestRecorderWorked checks a Result worked out by hand. Three workers;
// worker 2 serves nothing.
//
//	worker issued ttft  e2e   prompt cached out  itl = (e2e−ttft)/(out−1)
//	0      0      100   1100  1000   500    11   100
//	0      1000   300   2300  1000   1000   5    500
//	1      2000   200   200   2000   0      1    (none: one token)
//	failed 500
//
// TTFT {100, 300, 200}: p50 200, mean 200, p90 280, p99 298.
// ITL {100, 500}: p50 300, p99 496. E2E {1100, 2300, 200}: p50 1100,
// p99 2276. Span 0 → 3300 ms (second request ends at 1000+2300), 17 output
// tokens: 17/3.3 = 5.1515 tok/s. Hit 1500/4000 = 0.375; bound 0.5 → 0.75.
// Shares 2/3 and 0.
func TestRecorderWorked(t *testing.T) {
	r := NewRecorder(3)
	msd := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	r.Add(Record{Worker: 0, Issued: 0, TTFT: msd(100), E2E: msd(1100), PromptTokens: 1000, CachedTokens: 500, OutputTokens: 11})
	r.Add(Record{Worker: 0, Issued: msd(1000), TTFT: msd(300), E2E: msd(2300), PromptTokens: 1000, CachedTokens: 1000, OutputTokens: 5})
	r.Add(Record{Worker: 1, Issued: msd(2000), TTFT: msd(200), E2E: msd(200), PromptTokens: 2000, OutputTokens: 1})
	r.Add(Record{Worker: 2, Issued: msd(500), Failed: true})
	r.AddPreemptions(4)
	got := r.Result("kv", 0.5)
	want := Result{Policy: "kv", Requests: 3, Failed: 1, TTFTP50Ms: 200, TTFTP90Ms: 280, TTFTP99Ms: 298, TTFTMeanMs: 200,
		ITLP50Ms: 300, ITLP99Ms: 496, E2EP50Ms: 1100, E2EP99Ms: 2276, ThroughputTokS: 17 / 3.3,
		HitRatio: 0.375, BoundHitRatio: 0.5, HitRatioOverBound: 0.75, MaxWorkerShare: 2.0 / 3, MinWorkerShare: 0, Preemptions: 4, Workers: 3}
	gj, _ := json.Marshal(roundResult(got))
	wj, _ := json.Marshal(roundResult(want))
	if !bytes.Equal(gj, wj) {
		t.Fatalf("got  %s\nwant %s", gj, wj)
	}
	if !slices.Equal(r.WorkerRequests(), []int{2, 1, 0}) || len(r.TTFTs()) != 3 {
		t.Fatalf("workers %v ttfts %v", r.WorkerRequests(), r.TTFTs())
	}
	// Worker 0 computed 500 + 0 of its two prompts, worker 1 all 2,000 of
	// its one; the failed request on worker 2 computed nothing.
	if got := r.WorkerPrefillTokens(); !slices.Equal(got, []int64{500, 2000, 0}) {
		t.Fatalf("prefill tokens per worker %v, want [500 2000 0]", got)
	}
	if e := NewRecorder(2).Result("empty", 0); e != (Result{Policy: "empty", Workers: 2}) {
		t.Fatalf("empty result %+v", e)
	}
}

// roundResult rounds floats to 9 decimals so float noise does not fail an
// exact comparison.
func roundResult(r Result) Result {
	for _, f := range []*float64{&r.TTFTP50Ms, &r.TTFTP90Ms, &r.TTFTP99Ms, &r.TTFTMeanMs, &r.ITLP50Ms, &r.ITLP99Ms,
		&r.E2EP50Ms, &r.E2EP99Ms, &r.ThroughputTokS, &r.HitRatio, &r.BoundHitRatio, &r.HitRatioOverBound,
		&r.MaxWorkerShare, &r.MinWorkerShare} {
		*f = math.Round(*f*1e9) / 1e9
	}
	return r
}

// fixedResults is the golden input: two policies with distinct values in
// every field, and one NaN that JSON must write as 0.
func fixedResults() []Result {
	return []Result{
		{Policy: "kv", Workload: "trace conversation ×1", Workers: 8, Requests: 12031, TTFTP50Ms: 412.5, TTFTP90Ms: 1310.25, TTFTP99Ms: 4021, TTFTMeanMs: 655.125,
			ITLP50Ms: 21.5, ITLP99Ms: 48.75, E2EP50Ms: 8123, E2EP99Ms: 20111, ThroughputTokS: 1234.5,
			HitRatio: 0.326, BoundHitRatio: 0.332, HitRatioOverBound: 0.326 / 0.332, MaxWorkerShare: 0.131,
			MinWorkerShare: 0.119, Preemptions: 3},
		{Policy: "round-robin", Requests: 12031, Failed: 2, TTFTP50Ms: 1988, TTFTP90Ms: 9001.5, TTFTP99Ms: 30000,
			TTFTMeanMs: math.NaN(), ITLP50Ms: 25, ITLP99Ms: 60.125, E2EP50Ms: 10500, E2EP99Ms: 41000,
			ThroughputTokS: 1100, HitRatio: 0.098, BoundHitRatio: 0.332, HitRatioOverBound: 0.098 / 0.332,
			MaxWorkerShare: 0.125, MinWorkerShare: 0.125, Preemptions: 17},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from golden (run with -update after checking):\n%s", name, got)
	}
}

func TestWriteTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTable(&b, fixedResults()); err != nil {
		t.Fatal(err)
	}
	golden(t, "table.golden", b.Bytes())
}

func TestWriteJSONGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteJSON(&b, fixedResults()); err != nil {
		t.Fatal(err)
	}
	golden(t, "results.golden.json", b.Bytes())
	var back []map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "ttft_mean_ms", "itl_p50_ms", "itl_p99_ms",
		"e2e_p50_ms", "e2e_p99_ms", "throughput_tok_s", "hit_ratio", "bound_hit_ratio", "hit_ratio_over_bound",
		"max_worker_share", "min_worker_share", "preemptions", "requests"} {
		if _, ok := back[0][k]; !ok {
			t.Errorf("json lacks %q", k)
		}
	}
}

func TestPlots(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("REPORT_PLOT_DIR"); d != "" {
		dir = d // to look at the images
	}
	var fast, slow []float64
	for i := range 500 {
		fast = append(fast, 50+float64(i%100))
		slow = append(slow, 200+float64(i*i%9000))
	}
	load := WorkerLoad{Policy: "kv", Quantity: "active requests"}
	for i := range 60 {
		load.Times = append(load.Times, time.Duration(i)*time.Second)
	}
	for w := range 4 {
		var s []float64
		for i := range 60 {
			s = append(s, float64((i*(w+1))%17))
		}
		load.Load = append(load.Load, s)
	}
	paths, err := WritePlots(dir, fixedResults(), []Sample{{"kv", fast}, {"round-robin", slow}, {"empty", nil}},
		[]WorkerLoad{load, {Policy: "no data"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{FileTTFTCDF, FileHitRatio, LoadFile("kv")}
	if len(paths) != len(want) {
		t.Fatalf("wrote %v", paths)
	}
	for i, p := range paths {
		if filepath.Base(p) != want[i] {
			t.Fatalf("wrote %v, want %v", paths, want)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 300 {
			t.Fatalf("%s: %v", p, b)
		}
		colours := map[uint32]bool{}
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
				r, g, b, _ := img.At(x, y).RGBA()
				colours[r>>8<<16|g>>8<<8|b>>8] = true
			}
		}
		if len(colours) < 4 {
			t.Fatalf("%s has %d colours: blank?", p, len(colours))
		}
	}
	if err := WriteTTFTCDF(&bytes.Buffer{}, nil); !errors.Is(err, ErrNoData) {
		t.Fatalf("empty cdf: %v", err)
	}
	if LoadFile("a/b c") != "load_a_b_c.png" {
		t.Fatal(LoadFile("a/b c"))
	}
}

func TestLineProgress(t *testing.T) {
	now := time.Unix(1000, 0)
	var b bytes.Buffer
	p := NewProgress(&b, ProgressConfig{What: "kv", Total: 10, Interval: 5 * time.Second, Now: func() time.Time { return now }})
	p.Add(3) // no time passed: no line
	now = now.Add(6 * time.Second)
	p.Add(2) // a line
	now = now.Add(time.Second)
	p.Add(5) // too soon
	p.Finish()
	p.Finish()
	want := "kv: 5/10 requests (50.0%) after 6s\nkv: 10/10 requests (100.0%) after 7s\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	p = NewProgress(&b, ProgressConfig{What: "rr", Now: func() time.Time { return now }})
	p.Add(4)
	p.Finish()
	if !strings.HasPrefix(b.String(), "rr: 4 requests after 0s") {
		t.Fatalf("unknown total: %q", b.String())
	}
	// A file that is not a terminal gets lines too.
	f, err := os.CreateTemp(t.TempDir(), "progress")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p = NewProgress(f, ProgressConfig{What: "f", Total: 1})
	if _, ok := p.(*lineProgress); !ok {
		t.Fatalf("non-terminal file got %T", p)
	}
}

func TestLoadRecorder(t *testing.T) {
	l := NewLoadRecorder("rr", "requests in flight")
	l.Sample(0, []float64{1})
	l.Sample(time.Second, []float64{2, 3})
	got := l.WorkerLoad()
	want := WorkerLoad{Policy: "rr", Quantity: "requests in flight", Times: []time.Duration{0, time.Second},
		Load: [][]float64{{1, 2}, {0, 3}}}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(gj, wj) {
		t.Fatalf("got %s, want %s", gj, wj)
	}
}

func TestWindowMeans(t *testing.T) {
	times := []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
	got := windowMeans(times, []float64{1, 3, 5, 7, 9}, 2)
	// Window of 3: mean(1,3,5) at 0 s, mean(7,9) at 3 s.
	if len(got) != 2 || got[0].X != 0 || got[0].Y != 3 || got[1].X != 3 || got[1].Y != 8 {
		t.Fatalf("%v", got)
	}
	if got := windowMeans(times, []float64{1, 2}, 10); len(got) != 2 || got[1].Y != 2 {
		t.Fatalf("short: %v", got)
	}
}

func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		n      int
		want   []string
	}{
		// Steps of 1, 2 or 5 × 10^k, the smallest giving at most n intervals.
		{0, 20, 2, []string{"0", "10", "20"}},
		{0, 25, 2, []string{"0", "20"}},
		{0, 1, 4, []string{"0.0", "0.5", "1.0"}},
		{0, 0.35, 4, []string{"0.0", "0.1", "0.2", "0.3"}},
		{-1e-12, 870, 6, []string{"0", "200", "400", "600", "800"}},
		{-30, 30, 3, []string{"-20", "0", "20"}},
		{3, 3, 2, []string{"3"}},
	} {
		var got []string
		for _, tk := range (niceTicks{N: c.n}).Ticks(c.lo, c.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("ticks(%v, %v, %d) = %q, want %q", c.lo, c.hi, c.n, got, c.want)
		}
	}
}

// Each worker's panel is drawn in a colour of its own.
func TestWorkerLoadColours(t *testing.T) {
	load := WorkerLoad{Policy: "kv", Quantity: "requests in flight"}
	for i := range 300 {
		load.Times = append(load.Times, time.Duration(i)*time.Second)
	}
	for w := range 8 {
		s := make([]float64, len(load.Times))
		for i := range s {
			s[i] = float64((i + 13*w) % 23)
		}
		load.Load = append(load.Load, s)
	}
	var buf bytes.Buffer
	if err := WriteWorkerLoad(&buf, load); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[3]uint8]int{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[[3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)}]++
		}
	}
	for w := range 8 {
		c := workerColors[w]
		if seen[[3]uint8{c.R, c.G, c.B}] < 50 {
			t.Errorf("worker %d's colour %v is (almost) not in the image", w, c)
		}
		for v := range w {
			if workerColors[v] == c {
				t.Errorf("workers %d and %d share colour %v", v, w, c)
			}
		}
	}
}
