package service

import (
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/mocker"
)

// TestFleetPerWorker starts two mock workers with their own speed, token
// budget and KV capacity and checks each worker's engine and what it
// advertises to a static router.
func TestFleetPerWorker(t *testing.T) {
	model, err := LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	fc := DefaultFleetConfig()
	fc.Workers = 2
	fc.Engine.BlockSize = 16
	fc.Engine.NumGPUBlocks = 1024
	fc.Engine.SpeedupRatio = 10
	fc.Tokenizer = model.Tokenizer
	fc.PerWorker = mocker.Fleet{Speeds: []float64{1, 2.5}, BatchTokens: []int{512, 2048}, KVBlocks: []int{256}}
	for k, want := range []float64{10, 25} {
		if got := mockConfig(fc, k, 1, nil, nil).Engine; got.SpeedupRatio != want || got.MaxNumBatchedTokens != fc.PerWorker.BatchTokens[k] || got.NumGPUBlocks != 256 {
			t.Fatalf("worker %d engine: speedup %v, batch %d, blocks %d", k, got.SpeedupRatio, got.MaxNumBatchedTokens, got.NumGPUBlocks)
		}
	}
	f, err := StartFleet(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	for k, s := range f.Static() {
		if s.KVBlocks != 256 || s.MaxBatchedTokens != uint64(fc.PerWorker.BatchTokens[k]) {
			t.Fatalf("worker %d advertises %+v", k, s)
		}
	}
	fc.PerWorker.Speeds = []float64{1, 2, 3}
	if _, err := StartFleet(fc); err == nil || !strings.Contains(err.Error(), "worker speeds has 3 values for 2 workers") {
		t.Fatalf("3 speeds for 2 workers: %v", err)
	}
}
