package liveindex

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Readers query while writers store and remove whole chains: a reader
// must only ever see a chain entirely present or entirely absent for a
// worker (no half-applied event), and -race must stay quiet.
func TestStress(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Writers = 4
	cfg.QueueLen = 64
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const nw, rounds, depth = 8, 300, 16
	path := make([]uint64, depth)
	for i := range path {
		path[i] = uint64(i + 1)
	}
	var stop atomic.Bool
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s index.Scores
			for !stop.Load() {
				c.Query(path, &s)
				for _, sc := range s.List {
					if sc.Worker.ID < nw && sc.Blocks != depth && sc.Blocks != 0 {
						bad.Add(1)
					}
				}
			}
		}()
	}
	// Approximate workers and removals churn alongside.
	wg.Add(1)
	go func() {
		defer wg.Done()
		now := t0
		for i := 0; !stop.Load(); i++ {
			w := kvevent.WorkerRank{ID: kvevent.WorkerID(100 + i%5)}
			now = now.Add(time.Second)
			_ = c.Record(w, path[:1+i%depth], now)
			_ = c.Predict(kvevent.WorkerRank{ID: kvevent.WorkerID(i % nw)}, path, now) // full path: scores stay 0 or depth
			if i%7 == 0 {
				_ = c.RemoveWorker(w.ID)
			}
			if i%11 == 0 {
				_ = c.Expire(now)
			}
		}
	}()
	for r := range rounds {
		for w := range kvevent.WorkerID(nw) {
			wk := kvevent.WorkerRank{ID: w}
			if r%2 == 0 {
				_ = c.Apply(chain(wk, 0, 1000, path...))
			} else {
				_ = c.Apply(kvevent.Event{Worker: wk, Kind: kvevent.Removed, Removed: []uint64{1000}})
			}
		}
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d queries saw a half-applied event", n)
	}
	for id := range kvevent.WorkerID(200) {
		_ = c.RemoveWorker(id)
	}
	_ = c.Flush()
	if s := c.Stats(); s.Nodes != 0 || s.Events != nw*rounds {
		t.Fatalf("final stats %+v", s)
	}
	c.Close()
	if err := c.Apply(kvevent.Event{}); err != ErrClosed {
		t.Fatalf("Apply after Close: %v", err)
	}
}
