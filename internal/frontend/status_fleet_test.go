package frontend

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

func TestPickWorkersUnhealthyThenBusiest(t *testing.T) {
	var views []workerJSON
	inFlight := []int{5, 0, 9, 1, 7, 3, 0, 2}
	for i, n := range inFlight {
		views = append(views, workerJSON{Worker: fmt.Sprint("w", i), State: "EXACT", Ranks: []rankJSON{{ActiveRequests: n}}})
	}
	views[1].State = "DEGRADED"
	views[6].Down = true
	got := []string{}
	for _, w := range pickWorkers(views, 4) {
		got = append(got, w.Worker)
	}
	// w1 and w6 (unhealthy), then w2 (9) and w4 (7), in table order.
	if want := []string{"w1", "w2", "w4", "w6"}; !slices.Equal(got, want) {
		t.Fatalf("picked %v, want %v", got, want)
	}
	if n := len(pickWorkers(views, -1)); n != len(views) {
		t.Fatalf("limit -1 kept %d of %d", n, len(views))
	}
	if s := statesOf(views); s["EXACT"] != 6 || s["DEGRADED"] != 1 || s["DOWN"] != 1 {
		t.Fatalf("states %v", s)
	}
}

func TestRecordDecisionKeepsTheChosenAndTheCheapest(t *testing.T) {
	f := &Frontend{dir: &testDir{}, blockSize: 16}
	const n = 40
	d := router.Decision{Decision: scheduler.Decision{Policy: "kv", Chosen: 7}}
	for i := range n {
		row := scheduler.Explanation{Worker: kvevent.WorkerRank{ID: kvevent.WorkerID(i + 1)}, Cost: float64(100 - i)}
		if i >= n-3 {
			row.Excluded = scheduler.BusyPrefillTokens // the three cheapest are busy
		}
		d.Candidates = append(d.Candidates, row)
	}
	d.Worker = d.Candidates[d.Chosen].Worker
	v := f.recordDecision(d, true)
	if v.CandidatesTotal != n || len(v.Candidates) != recordCandidates {
		t.Fatalf("%d of %d rows kept, want %d of %d", len(v.Candidates), v.CandidatesTotal, recordCandidates, n)
	}
	// The chosen row (worker 8), then the 15 cheapest eligible: workers
	// 23..37 (costs 78..64), in the decision's order.
	want := []uint64{8}
	for id := uint64(23); id <= 37; id++ {
		want = append(want, id)
	}
	var got []uint64
	for _, c := range v.Candidates {
		got = append(got, c.WorkerID)
		if c.Chosen != (c.WorkerID == 8) {
			t.Fatalf("row of worker %d: chosen %v", c.WorkerID, c.Chosen)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows of workers %v, want %v", got, want)
	}
	d.Candidates = d.Candidates[:recordCandidates]
	if v := f.recordDecision(d, true); v.CandidatesTotal != 0 || len(v.Candidates) != recordCandidates {
		t.Fatalf("a small decision: %d rows, total %d; want all, no total", len(v.Candidates), v.CandidatesTotal)
	}
}

func TestPageWorkers(t *testing.T) {
	views := make([]workerJSON, 10)
	for i := range views {
		views[i].WorkerID = uint64(i)
	}
	for _, tc := range []struct {
		q     string
		first uint64
		n     int
	}{{"", 0, 10}, {"limit=3", 0, 3}, {"offset=8&limit=5", 8, 2}, {"offset=20", 0, 0}, {"offset=-1&limit=x", 0, 10}} {
		q, _ := url.ParseQuery(tc.q)
		got := pageWorkers(views, q)
		if len(got) != tc.n || (tc.n > 0 && got[0].WorkerID != tc.first) {
			t.Fatalf("%q: %d workers from %v, want %d from %d", tc.q, len(got), got, tc.n, tc.first)
		}
	}
}

// With a hundred workers the status JSON shows statusWorkers of them and
// counts them all, its recent decisions keep recordCandidates rows each,
// ?workers=all shows every worker, and /v1/workers pages.
func TestStatusSummarisesALargeFleet(t *testing.T) {
	front, client := fleetFront(t, 100)
	get := func(path string, into any) {
		t.Helper()
		resp, err := client.Get(front.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var d statusJSON
	get("/?format=json", &d)
	if d.WorkersTotal != 100 || len(d.Workers) != statusWorkers || d.WorkersByState["APPROX"] != 100 {
		t.Fatalf("status: %d workers shown of %d, states %v", len(d.Workers), d.WorkersTotal, d.WorkersByState)
	}
	if len(d.Recent) == 0 {
		t.Fatal("no recent requests")
	}
	for _, r := range d.Recent {
		if r.Decision.CandidatesTotal != 100 || len(r.Decision.Candidates) != recordCandidates {
			t.Fatalf("request %s: %d rows of %d", r.RequestID, len(r.Decision.Candidates), r.Decision.CandidatesTotal)
		}
	}
	if len(d.Charts.Workers) != statusWorkers {
		t.Fatalf("charts of %d workers, want the %d shown", len(d.Charts.Workers), statusWorkers)
	}
	for _, c := range d.Charts.Workers {
		if !slices.ContainsFunc(d.Workers, func(w workerJSON) bool { return w.WorkerID == c.WorkerID }) {
			t.Fatalf("chart of worker %d, not among those shown", c.WorkerID)
		}
	}
	get("/?format=json&workers=all", &d)
	if len(d.Workers) != 100 {
		t.Fatalf("workers=all: %d workers", len(d.Workers))
	}
	var page struct {
		Total   int          `json:"total"`
		Workers []workerJSON `json:"workers"`
	}
	get("/v1/workers?offset=95&limit=10", &page)
	if page.Total != 100 || len(page.Workers) != 5 || page.Workers[0].Worker != "worker-96" {
		t.Fatalf("/v1/workers page: total %d, %d workers, first %v", page.Total, len(page.Workers), page.Workers)
	}
}
