package frontend

import (
	"cmp"
	"net/url"
	"slices"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/timeline"
)

// A fleet of a thousand workers made the status JSON 18 MB (50 recent
// decisions of 1,024 candidate rows each, and a table and charts of every
// worker), too much for a page that fetches it every few seconds, and
// rendering every decision's 1,024 rows cost each proxied request more
// than routing it. So the status page is a summary past a few dozen
// workers: each recent decision keeps its chosen row and the cheapest
// others (recordCandidates in all, counted in candidates_total), and the
// workers table and charts show statusWorkers workers (the unhealthy
// first, then the busiest; ?workers=N or ?workers=all for more), with
// the count per state of all of them. /v1/route and /v1/workers stay
// complete (the latter pages with ?limit and ?offset).

const (
	// recordCandidates is how many candidate rows a recent decision on
	// the status page keeps.
	recordCandidates = 16
	// statusWorkers is how many workers the status JSON shows by default.
	statusWorkers = 64
)

// recordDecision renders d for the status page's table of recent
// requests: as decisionView, but with at most recordCandidates rows (the
// chosen one and the cheapest eligible others, in their order) and
// CandidatesTotal set when rows were left out.
func (f *Frontend) recordDecision(d router.Decision, chosen bool) decisionJSON {
	total := len(d.Candidates)
	if total <= recordCandidates {
		return f.decisionView(d, chosen)
	}
	keep := make([]int, 0, total)
	for i := range d.Candidates {
		keep = append(keep, i)
	}
	rank := func(i int) int {
		switch {
		case chosen && i == d.Chosen:
			return 0
		case d.Candidates[i].Excluded == "":
			return 1
		}
		return 2
	}
	slices.SortStableFunc(keep, func(a, b int) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return cmp.Compare(d.Candidates[a].Cost, d.Candidates[b].Cost)
	})
	keep = keep[:recordCandidates]
	slices.Sort(keep)
	short := d
	short.Candidates = make([]router.Explanation, len(keep))
	for j, i := range keep {
		short.Candidates[j] = d.Candidates[i]
		if i == d.Chosen {
			short.Chosen = j
		}
	}
	v := f.decisionView(short, chosen)
	v.CandidatesTotal = total
	return v
}

// workersLimit reads ?workers= (a count, or "all") from the status
// page's query; the default is statusWorkers.
func workersLimit(q url.Values) int {
	switch s := q.Get("workers"); s {
	case "":
		return statusWorkers
	case "all":
		return -1
	default:
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return n
		}
		return statusWorkers
	}
}

// pickWorkers returns at most limit of views (all when limit < 0), in
// their order: those down or in an unhealthy state first, then the ones
// with the most requests in flight.
func pickWorkers(views []workerJSON, limit int) []workerJSON {
	if limit < 0 || len(views) <= limit {
		return views
	}
	idx := make([]int, len(views))
	inFlight := make([]int, len(views))
	for i, w := range views {
		idx[i] = i
		for _, r := range w.Ranks {
			inFlight[i] += r.ActiveRequests
		}
	}
	healthy := func(w workerJSON) bool {
		return !w.Down && (w.State == fleet.StateExact.String() || w.State == fleet.StateApprox.String())
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ha, hb := healthy(views[a]), healthy(views[b])
		if ha != hb {
			if hb {
				return -1
			}
			return 1
		}
		return cmp.Compare(inFlight[b], inFlight[a])
	})
	idx = idx[:limit]
	slices.Sort(idx)
	out := make([]workerJSON, len(idx))
	for j, i := range idx {
		out[j] = views[i]
	}
	return out
}

// statesOf counts views by state ("DOWN" for a worker marked down).
func statesOf(views []workerJSON) map[string]int {
	m := map[string]int{}
	for _, w := range views {
		s := w.State
		if w.Down {
			s = "DOWN"
		}
		m[s]++
	}
	return m
}

// onlyWorkers returns hist with only the workers of shown in each point
// (shown has every worker: hist unchanged).
func onlyWorkers(hist []timeline.Point, shown []workerJSON, all int) []timeline.Point {
	if len(shown) == all {
		return hist
	}
	keep := make(map[uint64]bool, len(shown))
	for _, w := range shown {
		keep[w.WorkerID] = true
	}
	out := make([]timeline.Point, len(hist))
	for i, p := range hist {
		ws := make([]timeline.Worker, 0, min(len(p.Workers), len(shown)))
		for _, w := range p.Workers {
			if keep[w.ID] {
				ws = append(ws, w)
			}
		}
		p.Workers = ws
		out[i] = p
	}
	return out
}

// pageWorkers applies /v1/workers' ?offset= and ?limit= to views.
func pageWorkers(views []workerJSON, q url.Values) []workerJSON {
	off, _ := strconv.Atoi(q.Get("offset"))
	off = min(max(off, 0), len(views))
	views = views[off:]
	if s := q.Get("limit"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < len(views) {
			views = views[:n]
		}
	}
	return views
}
