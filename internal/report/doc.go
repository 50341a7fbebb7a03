// Package report turns simulator and benchmark measurements into the numbers
// and pictures that compare routing policies: latency percentiles, a
// per-policy Result (the JSON object and table row), PNG plots, and a
// progress display.
//
// It is the shared edge of `kvrouter sim` (offline) and `kvrouter bench`
// (online): both record one Record per completed request into a Recorder
// and ask it for a Result, so the two report the same quantities computed
// the same way. Percentiles use linear interpolation between order
// statistics (see Percentile), the method numpy and AIPerf use by default,
// so numbers can be compared with published benchmark output.
package report
