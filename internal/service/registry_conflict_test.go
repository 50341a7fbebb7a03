package service

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// scrape GETs /metrics and returns its status and the value of the
// unlabelled sample name (-1 when absent).
func (r *rig) scrape(name string) (int, float64) {
	r.t.Helper()
	code, body := r.get("/metrics")
	v := -1.0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			if x, err := strconv.ParseFloat(f[1], 64); err == nil {
				v = x
			}
		}
	}
	return code, v
}

// TestRegistryNameConflictKeepsMetrics is issue 21 A6: two registry
// records (different worker ids, so different keys) with the same worker
// name made every /metrics scrape a 500 ("collected before"). The second
// is refused (the first registered keeps the name), counted once in
// kvrouter_discovery_conflicts_total, and the scrape stays 200.
func TestRegistryNameConflictKeepsMetrics(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1, plane: config.PlaneNATS})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg, err := registry.OpenRegistry(ctx, r.svc.Bus().JetStream(), r.svc.cfg.EventPlane.Registry, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id uint64, url string) fleet.WorkerRecord {
		return fleet.WorkerRecord{ID: fleet.DeriveID(fmt.Sprint("dup-", id)), Name: "dup", URL: url, BlockSize: blockSize, DPSize: 1,
			Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "test"}
	}
	first, second := rec(1, "http://127.0.0.1:9001"), rec(2, "http://127.0.0.1:9002")
	l1, err := reg.Register(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	defer l1.Abandon()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		_, ok := r.workers()["dup"]
		return ok, fmt.Sprint(r.workers())
	}, "first dup listed")
	l2, err := reg.Register(ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Abandon()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		code, v := r.scrape("kvrouter_discovery_conflicts_total")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		return v == 1, fmt.Sprint("conflicts_total ", v)
	}, "the conflict counted, /metrics 200")
	// Heartbeats of both go on: still one conflict, still 200, and the
	// first keeps the name and its URL. A record registered after two
	// of the second's heartbeats is the sign that the router has seen
	// them (the watch delivers in order).
	w, err := reg.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	puts := 0
	for puts < 2 {
		select {
		case c := <-w.C():
			if c.Kind == fleet.Put && c.Key == registry.RecordKey(second.ID) && !c.Initial {
				puts++
			}
		case <-ctx.Done():
			t.Fatal("no heartbeats of the second record")
		}
	}
	marker := rec(3, "http://127.0.0.1:9003")
	marker.Name = "marker"
	l3, err := reg.Register(ctx, marker)
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Abandon()
	poll.UntilState(r.t, 10*time.Second, func() (bool, string) {
		_, ok := r.workers()["marker"]
		return ok, fmt.Sprint(r.workers())
	}, "marker listed")
	if code, v := r.scrape("kvrouter_discovery_conflicts_total"); code != http.StatusOK || v != 1 {
		t.Fatalf("/metrics: %d, conflicts_total %v", code, v)
	}
	if got, ok := r.svc.dir.Get(first.ID); !ok || got.Record.URL != first.URL {
		t.Fatalf("the first record lost its name: %+v", got)
	}
	if _, ok := r.svc.dir.Get(second.ID); ok {
		t.Fatal("the second record was accepted")
	}
	if n := strings.Count(r.logs.String(), "reuses another worker's name"); n != 1 {
		t.Fatalf("conflict logged %d times, want once", n)
	}
	if v := r.metric("kvrouter_discovery_conflicting_records"); v != 1 {
		t.Fatalf("conflicting_records %v, want 1", v)
	}
}
