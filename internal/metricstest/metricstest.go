package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sum gathers g and returns the sum, over the series of the metric family
// named family whose labels include every given name, value pair, of each
// series' value: a counter's or gauge's value, a histogram's or summary's
// sample count. A family that is not registered (or has no such series)
// sums to 0. A Gather error, or an odd number of labels, fails t.
func Sum(t testing.TB, g prometheus.Gatherer, family string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metricstest.Sum(%s): labels %q are not name, value pairs", family, labels)
		return 0
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather %s: %v", family, err)
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if has(m, labels) {
				sum += value(m)
			}
		}
	}
	return sum
}

// has reports whether m carries every name, value pair of labels.
func has(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// value is one series' value: counter, gauge, untyped, or the sample count
// of a histogram or summary.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	default:
		return m.GetUntyped().GetValue()
	}
}
