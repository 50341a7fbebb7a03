package registry

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestLongOutageKeepsSameInstance is issue 21 A7's outage case (noticed at
// the previous stop): NATS down for longer than the TTL used to end with
// every worker removed and re-added on reconnect (its index rebuilt), as
// the bucket could not tell a worker that kept heartbeating into the void
// from one that registered again. With the instance id, a worker whose
// record comes back from the same process is kept: the directory sends no
// notification at all, while a worker that came back from another process
// (its instance changed while NATS was down) is removed and added again.
func TestLongOutageKeepsSameInstance(t *testing.T) {
	ns := natstest.StartRestartable(t)
	conn := func() jetstream.JetStream {
		nc := natstest.Connect(t, ns.URL(), nats.ReconnectWait(20*time.Millisecond))
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := ctxT(t)
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := RegistryConfig{Bucket: "workers", TTL: testTTL}
	routerJS, workerJS := conn(), conn()
	rreg, err := OpenRegistry(ctx, routerJS, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	wreg, err := OpenRegistry(ctx, workerJS, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, _, err := fleet.NewDirectory(fleet.Expect{BlockSize: 16, Hash: fleet.DefaultHashContract(), Takeover: testTTL / 2}, nil, log, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w, err := rreg.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	notes := make(chan fleet.Notification, 64)
	followCtx, stopFollow := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(followCtx, dir, w, func(n fleet.Notification) { notes <- n }, nil)
	}()
	t.Cleanup(func() { stopFollow(); w.Stop(); <-done })

	record := func(name, instance string) fleet.WorkerRecord {
		return fleet.WorkerRecord{Name: name, URL: "http://127.0.0.1:9", BlockSize: 16, DPSize: 1, Instance: instance,
			Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "test"}
	}
	// kept heartbeats through the outage from one process; moved is
	// replaced by another process while NATS is down.
	keptRec, movedRec := record("kept", ""), record("moved", "before")
	kept, err := wreg.Register(ctx, keptRec)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Abandon()
	moved, err := wreg.Register(ctx, movedRec)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if n := next(t, notes); n.Kind != fleet.Added {
			t.Fatalf("got %v %s, want added", n.Kind, n.Worker.Record.Name)
		}
	}
	// The reconnect hooks of the worker's side re-put at once.
	kick := func(l *Lease[fleet.WorkerRecord]) {
		l.RefreshOnReconnect(func(hook func()) func() {
			workerJS.Conn().SetReconnectHandler(func(*nats.Conn) { hook() })
			return func() {}
		})
	}
	kick(kept)

	ns.Stop()
	moved.Abandon() // that process dies while NATS is down ...
	time.Sleep(3 * testTTL)
	ns.Start(true)
	movedRec.Instance = "after" // ... and another one registers it
	var again *Lease[fleet.WorkerRecord]
	poll.Until(t, 10*time.Second, func() bool {
		c, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		again, err = wreg.Register(c, movedRec)
		return err == nil
	}, "re-registering moved")
	defer again.Abandon()

	// moved: removed, then added again.
	for _, want := range []fleet.NoteKind{fleet.Removed, fleet.Added} {
		n := next(t, notes)
		if n.Kind != want || n.Worker.Record.Name != "moved" {
			t.Fatalf("got %v %s, want %v moved; logs:\n%s", n.Kind, n.Worker.Record.Name, want, logs)
		}
	}
	// kept: its lapse reported as the outage's, and nothing announced.
	poll.Until(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "came back from the same process: worker kept")
	}, "kept's lapse seen by the directory")
	select {
	case n := <-notes:
		t.Fatalf("unexpected %v %s; logs:\n%s", n.Kind, n.Worker.Record.Name, logs)
	default:
	}
	if _, ok := dir.Get(fleet.DeriveID("kept")); !ok {
		t.Fatal("kept is gone")
	}
}

func next(t *testing.T, c <-chan fleet.Notification) fleet.Notification {
	t.Helper()
	select {
	case n := <-c:
		return n
	case <-time.After(15 * time.Second):
		t.Fatal("no notification")
	}
	return fleet.Notification{}
}
