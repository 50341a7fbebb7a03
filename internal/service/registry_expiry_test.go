package service

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// TestRouterRemovesWorkerExpiredDuringNATSRestart is issue 10 end to end
// (chaos: a router never logged "worker removed" for a worker whose
// registration expired while NATS restarted, and kept routing to it). The
// router's registry watcher re-watches after the restart; the first
// server back answers no JetStream request, so that reply is lost. The
// worker's heartbeats stop meanwhile, its record expires, and it registers
// again. The router must remove the worker (and add it back), not take
// the new registration for a heartbeat.
func TestRouterRemovesWorkerExpiredDuringNATSRestart(t *testing.T) {
	const ttl = 3 * time.Second // longer than the lost reply held the old watcher
	ns := natstest.StartRestartable(t)
	cfg := externalNATSConfig(t, ns.Port())
	cfg.EventPlane.Registry.TTL = ttl
	r := runService(t, cfg)
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		code, body := r.get(t, "/ready")
		return code == 200, body
	}, "router ready")

	url := ns.URL()
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg, err := registry.OpenRegistry(ctx, js, cfg.EventPlane.Registry, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := fleet.WorkerRecord{Name: "w-expiring", URL: "http://127.0.0.1:9", BlockSize: blockSize, DPSize: 1,
		Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "test"}
	listed := func() (bool, string) {
		_, body := r.get(t, "/v1/workers")
		return strings.Contains(body, rec.Name), body
	}
	lease, err := reg.Register(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, listed, "worker added")
	lease.Abandon()

	// NATS restarts; the first server back swallows JetStream requests.
	ns.Stop()
	ns.Start(false)
	var swallowed atomic.Int64
	sw := natstest.Connect(t, url)
	if _, err := sw.Subscribe("$JS.API.>", func(*nats.Msg) { swallowed.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		return swallowed.Load() > 0, "no JetStream request yet"
	}, "the router's re-watch request swallowed")
	sw.Close()
	ns.Stop()
	ns.Start(true)

	// The record expires on the server; the worker registers again.
	kv, err := js.KeyValue(ctx, cfg.EventPlane.Registry.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, err := kv.Get(ctx, registry.RecordKey(fleet.DeriveID(rec.Name)))
		return err != nil, "still there"
	}, "record expired on the server")
	again, err := reg.Register(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Abandon()
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		for _, l := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(l, `msg="worker removed"`) && strings.Contains(l, "worker="+rec.Name) {
				return true, l
			}
		}
		return false, "no removal logged"
	}, "the router logged the worker's removal")
	poll.UntilState(t, 10*time.Second, listed, "worker added again")
}
