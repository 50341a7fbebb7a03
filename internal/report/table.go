package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// WriteTable writes results as an aligned text table, one row per policy,
// in the given order.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\treqs\tfail\tttft p50\tp90\tp99\tmean\titl p50\tp99\te2e p50\tp99\ttok/s\thit\tbound\thit/bound\tmax share\tmin share\tpreempt\t")
	fmt.Fprintln(tw, "\t\t\tms\tms\tms\tms\tms\tms\tms\tms\t\t\t\t\t\t\t\t")
	for _, r := range results {
		// A zero bound is one nobody computed (bench online without
		// --bound-workers): say so rather than print "0.000".
		bound, over := "n/a", "n/a"
		if r.BoundHitRatio > 0 {
			bound, over = fmt.Sprintf("%.3f", r.BoundHitRatio), fmt.Sprintf("%.1f%%", 100*r.HitRatioOverBound)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.3f\t%s\t%s\t%.3f\t%.3f\t%d\t\n",
			r.Policy, r.Requests, r.Failed, r.TTFTP50Ms, r.TTFTP90Ms, r.TTFTP99Ms, r.TTFTMeanMs, r.ITLP50Ms, r.ITLP99Ms,
			r.E2EP50Ms, r.E2EP99Ms, r.ThroughputTokS, r.HitRatio, bound, over,
			r.MaxWorkerShare, r.MinWorkerShare, r.Preemptions)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

// WriteJSON writes results as an indented JSON array, one object per
// policy. Non-finite numbers (which JSON cannot carry) are written as 0.
func WriteJSON(w io.Writer, results []Result) error {
	clean := make([]Result, len(results))
	for i, r := range results {
		clean[i] = Finite(r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(clean); err != nil {
		return fmt.Errorf("writing json: %w", err)
	}
	return nil
}

// Finite returns r with its non-finite numbers (which JSON cannot carry)
// set to 0.
func Finite(r Result) Result {
	for _, f := range []*float64{&r.TTFTP50Ms, &r.TTFTP90Ms, &r.TTFTP99Ms, &r.TTFTMeanMs, &r.ITLP50Ms, &r.ITLP99Ms,
		&r.E2EP50Ms, &r.E2EP99Ms, &r.ThroughputTokS, &r.HitRatio, &r.BoundHitRatio, &r.HitRatioOverBound,
		&r.MaxWorkerShare, &r.MinWorkerShare} {
		if math.IsNaN(*f) || math.IsInf(*f, 0) {
			*f = 0
		}
	}
	return r
}
