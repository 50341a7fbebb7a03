package service

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
)

// TestDuplicateStoresMetric: a two-block stored event applied twice for
// the same worker rank is two duplicate stores on
// kvrouter_index_duplicate_stores_total; the same event for another
// worker adds none.
func TestDuplicateStoresMetric(t *testing.T) {
	cfg := config.Default()
	cfg.EventPlane.Kind = config.PlaneNone
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	reg := prometheus.NewRegistry()
	svc, err := New(cfg, Options{Logger: discardLog(), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	stored := func(w kvevent.WorkerID) kvevent.Event {
		return kvevent.Event{Worker: kvevent.WorkerRank{ID: w}, Kind: kvevent.Stored,
			Blocks: []kvevent.Block{{EngineHash: 100, LocalHash: 11}, {EngineHash: 101, LocalHash: 12}}}
	}
	for _, w := range []kvevent.WorkerID{1, 1, 2} {
		if err := svc.Index().Apply(stored(w)); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Index().Flush(); err != nil {
		t.Fatal(err)
	}
	if got := metricstest.Sum(t, reg, "kvrouter_index_block_ops_total"); got != 6 {
		t.Fatalf("block ops %v, want 6 (every event applied)", got)
	}
	if got := metricstest.Sum(t, reg, "kvrouter_index_duplicate_stores_total"); got != 2 {
		t.Fatalf("duplicate stores %v, want 2", got)
	}
}
