package report

import (
	"math"
	"slices"
)

// Percentile returns the p-th percentile (p in [0, 100]) of sorted, an
// ascending slice, by linear interpolation between the closest ranks
// (Hyndman and Fan's type 7, numpy's default): with n values the rank is
// h = (n−1)·p/100 and the result sorted[⌊h⌋] + (h−⌊h⌋)·(sorted[⌊h⌋+1] −
// sorted[⌊h⌋]). So p50 of 1..10 is 5.5, p90 is 9.1 and p99 is 9.91. An
// empty slice gives 0; p is clamped to [0, 100]; NaN p gives 0.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return 0
	}
	p = min(max(p, 0), 100)
	h := float64(n-1) * p / 100
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Summary describes a sample of latencies (or any values).
type Summary struct {
	// Count is the number of values.
	Count int
	// Mean is the arithmetic mean.
	Mean float64
	// Min and Max are the extremes.
	Min, Max float64
	// P50, P90 and P99 are percentiles by Percentile's method.
	P50, P90, P99 float64
}

// Summarize returns the summary of values, which it does not modify; NaN
// values are ignored. An empty sample gives the zero Summary.
func Summarize(values []float64) Summary {
	s := make([]float64, 0, len(values))
	sum := 0.0
	for _, v := range values {
		if !math.IsNaN(v) {
			s = append(s, v)
			sum += v
		}
	}
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	return Summary{
		Count: len(s), Mean: sum / float64(len(s)), Min: s[0], Max: s[len(s)-1],
		P50: Percentile(s, 50), P90: Percentile(s, 90), P99: Percentile(s, 99),
	}
}
