package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// identityRig is a router on an external NATS server with a short
// registry TTL, and a registry client of its own to play the workers.
type identityRig struct {
	*running
	reg *registry.Registry
	kv  jetstream.KeyValue
	ctx context.Context
}

const identityTTL = 4 * time.Second

func newIdentityRig(t *testing.T) *identityRig {
	srv := natstest.StartServer(t, -1, true)
	cfg := externalNATSConfig(t, 0)
	cfg.EventPlane.NATS.URL = srv.ClientURL()
	cfg.EventPlane.Registry.TTL = identityTTL
	r := runService(t, cfg)
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		code, body := r.get(t, "/ready")
		return code == 200, body
	}, "router ready")
	js, err := jetstream.New(natstest.Connect(t, srv.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	reg, err := registry.OpenRegistry(ctx, js, cfg.EventPlane.Registry, nil)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, cfg.EventPlane.Registry.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	return &identityRig{running: r, reg: reg, kv: kv, ctx: ctx}
}

func victimRecord(instance string) fleet.WorkerRecord {
	return fleet.WorkerRecord{ID: fleet.DeriveID("victim"), Name: "victim", URL: "http://127.0.0.1:9001", BlockSize: blockSize, DPSize: 1, Instance: instance,
		Events: fleet.EventSource{Kind: fleet.EventsNone}, Hash: fleet.DefaultHashContract(), RegisteredBy: "test"}
}

// url is the router's URL for the victim, "" when it has none.
func (r *identityRig) url() string {
	w, ok := r.svc.dir.Get(fleet.DeriveID("victim"))
	if !ok {
		return ""
	}
	return w.Record.URL
}

func (r *identityRig) logLines(t *testing.T, msg string) []string {
	var out []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, `msg="`+msg) {
			out = append(out, l)
		}
	}
	return out
}

// TestRegistryURLOverwriteLoggedAndCounted is issue 21 A7: an overwrite of
// a live worker's URL in the registry (a forged record, 14 of 40 prompts
// went to it) left no log line. A record without an instance id (as older
// registrants write) is still taken, but every URL change is now logged
// with the old and new URL and counted; one from another instance while
// the owner heartbeats is a takeover: ignored, logged, counted.
func TestRegistryURLOverwriteLoggedAndCounted(t *testing.T) {
	r := newIdentityRig(t)
	owner, err := r.reg.Register(r.ctx, victimRecord("owner"))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Abandon()
	poll.UntilState(t, 10*time.Second, func() (bool, string) { return r.url() != "", "not yet" }, "victim listed")

	forged := victimRecord("")
	forged.URL = "http://127.0.0.1:6666"
	if err := r.reg.Bucket().Put(r.ctx, registry.RecordKey(fleet.DeriveID("victim")), forged); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		ls := r.logLines(t, "worker URL changed")
		return len(ls) > 0 && strings.Contains(ls[0], "url=http://127.0.0.1:6666") && strings.Contains(ls[0], "old_url=http://127.0.0.1:9001") &&
			metricstest.Sum(t, r.running.reg, "kvrouter_discovery_url_changes_total") >= 1, strings.Join(ls, "\n")
	}, "the overwrite logged and counted")
	// The owner's next heartbeat takes its URL back (logged and counted too).
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		return r.url() == "http://127.0.0.1:9001" && metricstest.Sum(t, r.running.reg, "kvrouter_discovery_url_changes_total") >= 2, r.url()
	}, "the owner's URL back")
	if n := metricstest.Sum(t, r.running.reg, "kvrouter_discovery_takeovers_total"); n != 0 {
		t.Fatalf("takeovers %v before any", n)
	}

	// A second live process writes the key (another instance id).
	intruder := victimRecord("intruder")
	intruder.URL = "http://127.0.0.1:7777"
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		tk := time.NewTicker(identityTTL / 5)
		defer tk.Stop()
		for {
			_ = r.reg.Bucket().Put(r.ctx, registry.RecordKey(fleet.DeriveID("victim")), intruder)
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	})
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		if u := r.url(); u != "http://127.0.0.1:9001" {
			t.Fatalf("the intruder's URL was taken: %s", u)
		}
		return metricstest.Sum(t, r.running.reg, "kvrouter_discovery_takeovers_total") == 1, fmt.Sprint(metricstest.Sum(t, r.running.reg, "kvrouter_discovery_takeovers_total"))
	}, "the takeover counted")
	if ls := r.logLines(t, "two live processes register the same worker"); len(ls) != 1 || !strings.Contains(ls[0], "other_instance=intruder") {
		t.Fatalf("takeover log lines: %q", ls)
	}
	// Heartbeats go on on both sides: still one takeover, still the owner's URL.
	r.settle(t, "owner", 2)
	if u, n := r.url(), metricstest.Sum(t, r.running.reg, "kvrouter_discovery_takeovers_total"); u != "http://127.0.0.1:9001" || n != 1 {
		t.Fatalf("url %s, takeovers %v", u, n)
	}
}

// settle waits for n more puts of the victim's key by instance, then for
// the router to list a record registered after them: the router has seen
// those puts (the watch delivers in order).
func (r *identityRig) settle(t *testing.T, instance string, n int) {
	t.Helper()
	w, err := r.reg.Watch(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for n > 0 {
		select {
		case c := <-w.C():
			if c.Kind == fleet.Put && !c.Initial && c.Value.Name == "victim" && c.Value.Instance == instance {
				n--
			}
		case <-r.ctx.Done():
			t.Fatalf("no puts by %s", instance)
		}
	}
	m := victimRecord("")
	m.ID, m.Name = 0, fmt.Sprintf("marker-%d", time.Now().UnixNano())
	l, err := r.reg.Register(r.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Abandon)
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		_, ok := r.svc.dir.Get(fleet.DeriveID(m.Name))
		return ok, m.Name
	}, "marker listed")
}

// TestRegistryRestartVersusTakeover: a worker process that dies and is
// replaced (a new instance id, the old one silent) is a restart: taken at
// once, logged, no takeover; the new URL is logged as a URL change.
func TestRegistryRestartVersusTakeover(t *testing.T) {
	r := newIdentityRig(t)
	first, err := r.reg.Register(r.ctx, victimRecord("first"))
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) { return r.url() != "", "not yet" }, "victim listed")
	if err := first.Refresh(r.ctx); err != nil { // its last put: now
		t.Fatal(err)
	}
	first.Abandon() // the process dies ...
	// ... and its replacement registers after more than the takeover
	// window (TTL/2) but before the record expires (TTL).
	time.Sleep(identityTTL*2/3 + identityTTL/10)
	second := victimRecord("second")
	second.URL = "http://127.0.0.1:9002"
	again, err := r.reg.Register(r.ctx, second)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Abandon()
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		return r.url() == second.URL, r.url()
	}, "the restart taken")
	if ls := r.logLines(t, "worker restarted: a new process registered it"); len(ls) != 1 || !strings.Contains(ls[0], "old_instance=first instance=second") {
		t.Fatalf("restart log lines: %q", ls)
	}
	if ls := r.logLines(t, "worker removed"); len(ls) != 0 {
		t.Fatalf("the restart went through a removal (the record expired first?): %q", ls)
	}
	r.settle(t, "second", 2)
	if n := metricstest.Sum(t, r.running.reg, "kvrouter_discovery_takeovers_total"); n != 0 {
		t.Fatalf("takeovers %v after a restart", n)
	}
	if n := metricstest.Sum(t, r.running.reg, "kvrouter_discovery_url_changes_total"); n != 1 {
		t.Fatalf("url changes %v, want 1", n)
	}
}

// TestLongNATSOutageKeepsWorkers is issue 21 A7's outage case through the
// service: NATS down for three TTLs used to end with every worker removed
// and re-added on reconnect (its index dropped and rebuilt from a dump).
// The workers' records come back from the same process (instance id), so
// the router keeps them: no removal, the index entries untouched, and the
// index still equals the engines' caches afterwards.
func TestLongNATSOutageKeepsWorkers(t *testing.T) {
	const ttl = 2 * time.Second
	ns := natstest.StartRestartable(t)
	r := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS, cfg: func(c *config.Config) {
		c.EventPlane.NATS.URL = ns.URL()
		c.EventPlane.NATS.ReconnectWait = 50 * time.Millisecond
		c.EventPlane.Registry.TTL = ttl
	}})
	r.waitExact()
	ps := prompts(6, 11)
	r.matchEngines(ps, false)
	entries := r.metric("kvrouter_index_entries")
	if entries == 0 {
		t.Fatal("no index entries before the outage")
	}

	ns.Stop()
	time.Sleep(3 * ttl) // the outage
	ns.Start(true)
	poll.UntilState(r.t, 20*time.Second, func() (bool, string) {
		kept := 0
		for _, w := range r.fleet.Workers {
			for _, l := range strings.Split(r.logs.String(), "\n") {
				if strings.Contains(l, "came back from the same process: worker kept") && strings.Contains(l, "worker="+w.Name+" ") {
					kept++
					break
				}
			}
		}
		return kept == len(r.fleet.Workers), fmt.Sprint(kept, " kept")
	}, "both workers' lapses seen and kept")
	if n := r.metric("kvrouter_index_entries"); n != entries {
		t.Fatalf("index entries %v after the outage, %v before", n, entries)
	}
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, `msg="worker removed"`) {
			t.Fatalf("a worker was removed: %s", l)
		}
	}
	r.waitExact()
	r.matchEngines(ps, false)
}
