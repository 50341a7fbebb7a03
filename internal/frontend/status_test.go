package frontend

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// slotClock starts 0.5 s into a chart slot and moves 1 ms per reading,
// so that a test's few requests land in one slot however slow the machine.
type slotClock struct {
	mu  sync.Mutex
	now time.Time
}

func newSlotClock() *slotClock {
	return &slotClock{now: time.Unix(1_800_000_000, 0).Truncate(chartStep).Add(500 * time.Millisecond)}
}

func (c *slotClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func statusOf(t *testing.T, fl *testFleet) statusJSON {
	t.Helper()
	resp, body := fl.do("GET", "/?format=json", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status JSON: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var d statusJSON
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, body)
	}
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestStatusJSON(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 3})
	clk := newSlotClock()
	fl.f.clock = clk.read
	prompt := words(7, 80)
	for range 3 {
		if resp, body := fl.do("POST", "/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2}); resp.StatusCode != 200 {
			t.Fatalf("completion: %d %s", resp.StatusCode, body)
		}
	}
	fl.waitIdle()
	// A request's record is written after its booking is freed: wait for
	// all three before adding one that must be the newest.
	for deadline := time.Now().Add(5 * time.Second); statusOf(t, fl).Requests != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("status lists %d requests, want 3", statusOf(t, fl).Requests)
		}
	}
	// A request the router or a worker failed counts as an error.
	fl.f.finish(record{Time: clk.read(), RequestID: "failed-1", Endpoint: "chat", Status: 502, Outcome: "worker w9 failed", Actual: -1})
	d := statusOf(t, fl)

	if d.Model != testModel || d.BlockSize != 16 || d.RefreshSeconds != 5 || d.Requests != 4 || d.InFlight != 0 {
		t.Fatalf("header fields: %+v", d)
	}
	if len(d.Workers) != 3 || d.Workers[0].Worker != "w1" || d.Workers[2].Worker != "w3" {
		t.Fatalf("workers %+v", d.Workers)
	}
	if len(d.Recent) != 4 || d.Recent[0].RequestID != "failed-1" || d.Recent[0].ActualCached != nil {
		t.Fatalf("recent, newest first: %+v", d.Recent)
	}
	var predicted, actual, prompt3 int
	served := d.Recent[1].Worker
	for _, r := range d.Recent[1:] {
		if r.Status != 200 || r.Endpoint != "completions" || r.Worker != served || r.RequestID == "" || r.Attempts != 1 ||
			r.ActualCached == nil || len(r.Decision.Candidates) != 3 || r.Decision.Worker == nil || *r.Decision.Worker != served {
			t.Fatalf("recent request %+v", r)
		}
		if r.PredictedCached != r.OverlapBlocks*16 {
			t.Fatalf("predicted cached %d for %d overlap blocks", r.PredictedCached, r.OverlapBlocks)
		}
		predicted += r.PredictedCached
		actual += *r.ActualCached
		prompt3 += r.InputTokens
	}
	if predicted == 0 || actual == 0 {
		t.Fatalf("the repeated prompt was never a cache hit: predicted %d actual %d", predicted, actual)
	}
	if d.PredictedHitRatio == nil || !near(*d.PredictedHitRatio, float64(predicted)/float64(prompt3)) {
		t.Fatalf("predicted hit ratio %v, want %d/%d", d.PredictedHitRatio, predicted, prompt3)
	}

	// Charts: one sample (the slot the requests fell in), its rate over the
	// part of the slot gone by.
	c := d.Charts
	if c.StepSeconds != 5 || c.SpanSeconds != 900 || len(c.T) != 1 {
		t.Fatalf("charts %+v", c)
	}
	slot := d.Now.Truncate(chartStep)
	if c.T[0] != slot.UnixMilli() {
		t.Fatalf("sample at %d, want the slot start %d", c.T[0], slot.UnixMilli())
	}
	elapsed := max(d.Now.Sub(slot).Seconds(), 1)
	if got := c.Fleet.RequestsPerSecond[0]; got == nil || !near(*got, 4/elapsed) {
		t.Fatalf("requests/s %v, want 4 in %.3f s", got, elapsed)
	}
	if got := c.Fleet.ErrorRate[0]; got == nil || *got != 0.25 {
		t.Fatalf("error rate %v, want 1 of 4", got)
	}
	p50, p99 := c.Fleet.TTFTP50MS[0], c.Fleet.TTFTP99MS[0]
	longest := 0.0
	for _, r := range d.Recent[1:] {
		longest = max(longest, r.DurationMS)
	}
	if p50 == nil || p99 == nil || *p50 <= 0 || *p50 > *p99 || *p99 > longest*(1+latencyTolerance) {
		t.Fatalf("TTFT p50 %v p99 %v: want 0 < p50 ≤ p99 ≤ the longest request %.3f ms", p50, p99, longest)
	}
	if len(c.Workers) != 3 {
		t.Fatalf("worker series %+v", c.Workers)
	}
	for i, w := range c.Workers {
		if w.Worker != d.Workers[i].Worker || len(w.InFlight) != 1 || w.InFlight[0] == nil || *w.InFlight[0] != 0 ||
			w.CapacityBlocks[0] == nil || *w.CapacityBlocks[0] != 2048 || w.UsedBlocks[0] == nil || w.PrefillTokens[0] == nil {
			t.Fatalf("worker series %d: %+v", i, w)
		}
		if w.Worker != served {
			if w.PredictedHitRatio[0] != nil || w.ActualHitRatio[0] != nil {
				t.Fatalf("%s served nothing but has a hit ratio: %+v", w.Worker, w)
			}
			continue
		}
		if w.PredictedHitRatio[0] == nil || !near(*w.PredictedHitRatio[0], float64(predicted)/float64(prompt3)) ||
			w.ActualHitRatio[0] == nil || !near(*w.ActualHitRatio[0], float64(actual)/float64(prompt3)) {
			t.Fatalf("%s hit ratios %v %v, want %d/%d and %d/%d", served, w.PredictedHitRatio[0], w.ActualHitRatio[0],
				predicted, prompt3, actual, prompt3)
		}
	}
}

// latencyTolerance is the timeline's quantile resolution, rounded up.
const latencyTolerance = 0.03

// The page carries its first data inline (so it draws without a fetch)
// as JSON a script can parse, and a hostile worker name stays text.
func TestStatusPageEmbedsJSON(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1})
	evil := `</script><script>alert(1)</script>`
	fl.dir.set(WorkerEntry{ID: kvevent.WorkerID(9), Name: evil, URL: "http://x", Status: fleet.Status{State: fleet.StateDown}})
	resp, body := fl.do("GET", "/", nil)
	s := string(body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status page %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if strings.Contains(s, evil) || strings.Contains(s, "<script>alert") {
		t.Fatal("a worker name was written into the page as markup")
	}
	if strings.Contains(s, `http-equiv="refresh"`) {
		t.Fatal("the page still reloads itself")
	}
	const marker = "const initial = "
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("no inline data:\n%s", s)
	}
	var d statusJSON
	if err := json.NewDecoder(strings.NewReader(s[i+len(marker):])).Decode(&d); err != nil {
		t.Fatalf("inline data is not JSON: %v", err)
	}
	if d.Model != testModel || len(d.Workers) != 2 || d.Workers[1].Worker != evil || d.Workers[1].State != "DOWN" {
		t.Fatalf("inline data %+v", d)
	}
}

// The series are bounded: the timeline keeps chartSpan of samples, however
// long the router runs, and the samples carry the gauges read.
func TestStatusChartsSpan(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 2})
	t0 := time.Unix(1_800_000_000, 0).Truncate(chartStep)
	views := fl.f.workerViews()
	steps := int(2 * chartSpan / chartStep)
	for i := range steps {
		fl.f.sample(t0.Add(time.Duration(i)*chartStep), views)
	}
	now := t0.Add(time.Duration(steps-1) * chartStep)
	fl.f.clock = func() time.Time { return now }
	c := statusOf(t, fl).Charts
	if want := int(chartSpan / chartStep); len(c.T) != want {
		t.Fatalf("%d samples, want %d", len(c.T), want)
	}
	if first := now.Add(-chartSpan + chartStep); c.T[0] != first.UnixMilli() || c.T[len(c.T)-1] != now.UnixMilli() {
		t.Fatalf("samples from %d to %d, want %d to %d", c.T[0], c.T[len(c.T)-1], first.UnixMilli(), now.UnixMilli())
	}
	for _, w := range c.Workers {
		for i, v := range w.CapacityBlocks {
			if v == nil || *v != 2048 {
				t.Fatalf("%s capacity at %d: %v", w.Worker, i, v)
			}
		}
	}
}

// With no workers yet the lists are empty, not null (the page iterates
// them).
func TestStatusJSONNoWorkers(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 0})
	_, body := fl.do("GET", "/?format=json", nil)
	for _, want := range []string{`"workers":[]`, `"recent":[]`, `"t":[`, `"requests":0`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("status JSON lacks %s:\n%s", want, body)
		}
	}
}
