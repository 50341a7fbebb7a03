package metricstest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvrouter/kvrouter/internal/metricstest"
)

type fakeTB struct {
	testing.TB
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

// Sum adds counters, gauges and histogram sample counts over the series
// that carry every given label pair; an unknown family sums to 0.
func TestSumOverMatchingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	drops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "drops_total", Help: "x"}, []string{"reason", "worker"})
	depth := prometheus.NewGauge(prometheus.GaugeOpts{Name: "depth", Help: "x"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "latency_seconds", Help: "x"}, []string{"route"})
	reg.MustRegister(drops, depth, lat)
	drops.WithLabelValues("gap", "1").Add(2)
	drops.WithLabelValues("gap", "2").Add(3)
	drops.WithLabelValues("bad", "1").Add(5)
	depth.Set(-4)
	for range 7 {
		lat.WithLabelValues("a").Observe(1)
	}
	lat.WithLabelValues("b").Observe(100)
	for _, c := range []struct {
		family string
		labels []string
		want   float64
	}{
		{"drops_total", nil, 10},
		{"drops_total", []string{"reason", "gap"}, 5},
		{"drops_total", []string{"reason", "gap", "worker", "2"}, 3},
		{"drops_total", []string{"worker", "1"}, 7},
		{"drops_total", []string{"reason", "none"}, 0},
		{"drops_total", []string{"nolabel", ""}, 0},
		{"depth", nil, -4},
		{"latency_seconds", nil, 8},
		{"latency_seconds", []string{"route", "a"}, 7},
		{"missing_total", nil, 0},
	} {
		f := &fakeTB{}
		if got := metricstest.Sum(f, reg, c.family, c.labels...); got != c.want || len(f.fatals) != 0 {
			t.Errorf("Sum(%s, %q) = %v (fatals %q), want %v", c.family, c.labels, got, f.fatals, c.want)
		}
	}
}

type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) { return nil, errors.New("broken") }

// An odd label list or a registry that cannot gather fails the test.
func TestSumFailsOnBadInput(t *testing.T) {
	f := &fakeTB{}
	metricstest.Sum(f, prometheus.NewRegistry(), "x", "reason")
	if len(f.fatals) != 1 {
		t.Fatalf("odd labels: %d failures, want 1", len(f.fatals))
	}
	f = &fakeTB{}
	metricstest.Sum(f, failingGatherer{}, "x")
	if len(f.fatals) != 1 {
		t.Fatalf("gather error: %d failures, want 1", len(f.fatals))
	}
}
