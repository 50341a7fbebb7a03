package registry

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTTL = time.Second

func startBus(t *testing.T) *natsbus.Bus {
	t.Helper()
	c := natsbus.DefaultConfig()
	c.Port = -1
	c.DataDir = t.TempDir()
	b, err := natsbus.Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(); b.WaitForShutdown() })
	return b
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fixture is a registry, a directory following it, and the notifications
// it produced.
type fixture struct {
	reg   *Registry
	dir   *fleet.Directory
	notes chan fleet.Notification
}

func newFixture(t *testing.T, static []fleet.WorkerRecord) (*fixture, []fleet.Notification) {
	t.Helper()
	bus := startBus(t)
	ctx := ctxT(t)
	reg, err := OpenRegistry(ctx, bus.JetStream(), RegistryConfig{Bucket: "workers", TTL: testTTL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, initial, err := fleet.NewDirectory(fleet.Expect{BlockSize: 16, Hash: fleet.DefaultHashContract()}, static, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w, err := reg.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{reg: reg, dir: dir, notes: make(chan fleet.Notification, 100)}
	fctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { Follow(fctx, dir, w, func(n fleet.Notification) { f.notes <- n }, nil) })
	t.Cleanup(func() { cancel(); w.Stop(); wg.Wait() })
	return f, initial
}

func (f *fixture) next(t *testing.T) fleet.Notification {
	t.Helper()
	select {
	case n := <-f.notes:
		return n
	case <-time.After(15 * time.Second):
		t.Fatal("no notification")
	}
	return fleet.Notification{}
}

func rec(name string, blockSize int) fleet.WorkerRecord {
	return fleet.WorkerRecord{
		Name: name, URL: "http://127.0.0.1:9000", BlockSize: blockSize, DPSize: 1,
		Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract(), RegisteredBy: "test",
	}
}

func TestRegisterHeartbeatExpireDeregister(t *testing.T) {
	f, _ := newFixture(t, nil)
	ctx := ctxT(t)

	l1, err := f.reg.Register(ctx, rec("w1", 16))
	if err != nil {
		t.Fatal(err)
	}
	n := f.next(t)
	if n.Kind != fleet.Added || n.Worker.Record.Name != "w1" || n.Worker.Record.ID != fleet.DeriveID("w1") ||
		n.Worker.Origin != fleet.OriginRegistry || n.Worker.Status.State != fleet.StateDegraded {
		t.Fatalf("first notification: %+v", n)
	}

	// w2's heartbeat stops: it is removed once the TTL has passed, while
	// w1, still heartbeating, stays.
	l2, err := f.reg.Register(ctx, rec("w2", 16))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.next(t); n.Kind != fleet.Added || n.Worker.Record.Name != "w2" {
		t.Fatalf("w2 added: %+v", n)
	}
	abandoned := time.Now()
	l2.Abandon()
	n = f.next(t)
	if n.Kind != fleet.Removed || n.Worker.Record.Name != "w2" || !strings.Contains(n.Worker.Status.Reason, "expired") || n.Worker.Status.State != fleet.StateDown {
		t.Fatalf("w2 expiry: %+v", n)
	}
	if waited := time.Since(abandoned); waited < testTTL-testTTL/3 {
		t.Errorf("w2 removed after %v, before its TTL could pass", waited)
	}
	if _, ok := f.dir.Get(fleet.DeriveID("w1")); !ok {
		t.Fatal("heartbeating w1 was dropped")
	}

	// Deregistration.
	if err := l1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n = f.next(t)
	if n.Kind != fleet.Removed || n.Worker.Record.Name != "w1" || n.Worker.Status.Reason != "deregistered" {
		t.Fatalf("w1 deregistration: %+v", n)
	}
	if ws := f.dir.Workers(); len(ws) != 0 {
		t.Fatalf("workers left: %+v", ws)
	}
}

func TestRefusedLoudly(t *testing.T) {
	f, _ := newFixture(t, nil)
	ctx := ctxT(t)
	bad, err := f.reg.Register(ctx, rec("big", 32))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Abandon()
	other := rec("other", 16)
	other.Hash = fleet.HashContract{Scheme: "sha256-cbor"}
	lo, err := f.reg.Register(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Abandon()
	// Re-put the refused record (a heartbeat) before a good worker joins:
	// changes arrive in order, so once "good" is added both were seen.
	if err := bad.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	good, err := f.reg.Register(ctx, rec("good", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer good.Abandon()
	if n := f.next(t); n.Kind != fleet.Added || n.Worker.Record.Name != "good" {
		t.Fatalf("only the good worker is added, got %+v", n)
	}
	ws := f.dir.Workers()
	if len(ws) != 3 {
		t.Fatalf("workers: %+v", ws)
	}
	big, _ := f.dir.Get(fleet.DeriveID("big"))
	if big.Status.State != fleet.StateRefused || big.Status.Reason != "block size mismatch: block size 32 ≠ 16" {
		t.Errorf("big: %+v", big.Status)
	}
	oth, _ := f.dir.Get(fleet.DeriveID("other"))
	if oth.Status.State != fleet.StateRefused || !strings.Contains(oth.Status.Reason, "hash contract sha256-cbor ≠ xxh3-1337-v1+lora+ns") {
		t.Errorf("other: %+v", oth.Status)
	}
	st := f.dir.Stats()
	if got := st.Refused["block_size"]; got != 1 {
		t.Errorf("block_size refusals = %v, want 1 (heartbeats must not recount)", got)
	}
	if got := st.Refused["hash_contract"]; got != 1 {
		t.Errorf("hash_contract refusals = %v, want 1", got)
	}
	if got := st.Workers[fleet.StateRefused]; got != 2 {
		t.Errorf("REFUSED gauge = %v", got)
	}
	// Fixing the block size lets the worker in.
	if err := bad.Update(ctx, rec("big", 16)); err != nil {
		t.Fatal(err)
	}
	if n := f.next(t); n.Kind != fleet.Added || n.Worker.Record.Name != "big" {
		t.Fatalf("fixed worker: %+v", n)
	}
}

func TestStaticAndRegistryMerge(t *testing.T) {
	static, err := fleet.BuildStatic([]fleet.StaticWorker{
		{Name: "s1", URL: "http://10.0.0.1:8000", Events: "tcp://10.0.0.1:5557"},
		{Name: "s2", URL: "http://10.0.0.2:8000"},
		{Name: "s3", URL: "http://10.0.0.3:8000", BlockSize: 64},
	}, 16, fleet.DefaultHashContract())
	if err != nil {
		t.Fatal(err)
	}
	f, initial := newFixture(t, static)
	if len(initial) != 2 || initial[0].Worker.Record.Name != "s1" || initial[1].Worker.Record.Name != "s2" {
		t.Fatalf("initial notifications: %+v", initial)
	}
	if initial[0].Worker.Status.State != fleet.StateDegraded || initial[1].Worker.Status.State != fleet.StateApprox {
		t.Errorf("initial states: %v, %v", initial[0].Worker.Status, initial[1].Worker.Status)
	}
	if s3, _ := f.dir.Get(fleet.DeriveID("s3")); s3.Status.State != fleet.StateRefused {
		t.Errorf("static s3 with block size 64: %+v", s3.Status)
	}
	ctx := ctxT(t)
	// A registered worker named like a static one: static wins.
	clash := rec("s1", 16)
	clash.URL = "http://evil:1"
	lc, err := f.reg.Register(ctx, clash)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Abandon()
	ld, err := f.reg.Register(ctx, rec("d1", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Abandon()
	if n := f.next(t); n.Kind != fleet.Added || n.Worker.Record.Name != "d1" {
		t.Fatalf("want d1 added, got %+v", n)
	}
	s1, _ := f.dir.Get(fleet.DeriveID("s1"))
	if s1.Origin != fleet.OriginStatic || s1.Record.URL != "http://10.0.0.1:8000" {
		t.Errorf("static s1 replaced: %+v", s1)
	}
	if got := f.dir.Stats().Conflicts; got != 1 {
		t.Errorf("conflicts = %v", got)
	}
	names := []string{}
	for _, w := range f.dir.Workers() {
		names = append(names, w.Record.Name+"/"+w.Origin.String())
	}
	if got := strings.Join(names, " "); got != "d1/registry s1/static s2/static s3/static" {
		t.Errorf("workers = %s", got)
	}
}

func TestWatchSeesExistingRecordsThenSynced(t *testing.T) {
	bus := startBus(t)
	ctx := ctxT(t)
	reg, err := OpenRegistry(ctx, bus.JetStream(), RegistryConfig{Bucket: "w", TTL: testTTL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := reg.Register(ctx, rec("early", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abandon()
	w, err := reg.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	c := <-w.C()
	if c.Kind != fleet.Put || !c.Initial || c.Value.Name != "early" || c.Key != RecordKey(fleet.DeriveID("early")) {
		t.Fatalf("first change: %+v", c)
	}
	if c := <-w.C(); c.Kind != fleet.Synced {
		t.Fatalf("second change: %+v", c)
	}
}

// A second bucket of a different record type (router replicas) works the
// same way.
func TestGenericBucket(t *testing.T) {
	type routerRecord struct {
		ID   uint64 `json:"id"`
		Addr string `json:"addr"`
	}
	bus := startBus(t)
	ctx := ctxT(t)
	b, err := OpenBucket[routerRecord](ctx, bus.JetStream(), "routers", testTTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBucket[routerRecord](ctx, bus.JetStream(), "x", time.Millisecond, nil); err == nil {
		t.Error("ttl below MinTTL accepted")
	}
	w, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if c := <-w.C(); c.Kind != fleet.Synced {
		t.Fatalf("empty bucket: %+v", c)
	}
	if err := b.Put(ctx, "r1", routerRecord{ID: 1, Addr: "a"}); err != nil {
		t.Fatal(err)
	}
	if c := <-w.C(); c.Kind != fleet.Put || c.Value.Addr != "a" || c.Initial {
		t.Fatalf("put: %+v", c)
	}
	// Garbage in the bucket is reported, not fatal.
	if _, err := b.kv.Put(ctx, "r2", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if c := <-w.C(); c.Kind != fleet.Invalid || c.Err == nil || c.Key != "r2" {
		t.Fatalf("invalid: %+v", c)
	}
	if err := b.Delete(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if c := <-w.C(); c.Kind != fleet.Deleted || c.Key != "r1" {
		t.Fatalf("delete: %+v", c)
	}
}

func TestLeaseRefreshOnReconnect(t *testing.T) {
	bus := startBus(t)
	ctx := ctxT(t)
	b, err := OpenBucket[fleet.WorkerRecord](ctx, bus.JetStream(), "r", 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if c := <-w.C(); c.Kind != fleet.Synced {
		t.Fatalf("%+v", c)
	}
	l, err := b.Keep(ctx, "k", rec("a", 16))
	if err != nil {
		t.Fatal(err)
	}
	if c := <-w.C(); c.Kind != fleet.Put {
		t.Fatalf("first put: %+v", c)
	}
	var hook func()
	removed := false
	l.RefreshOnReconnect(func(h func()) func() { hook = h; return func() { removed = true } })
	hook() // a reconnect: the next heartbeat (10 s away) is not awaited
	hook() // hooks never block, even when a refresh is already pending
	select {
	case c := <-w.C():
		if c.Kind != fleet.Put || c.Key != "k" {
			t.Fatalf("refresh: %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no refresh after the reconnect hook")
	}
	l.Abandon()
	if !removed {
		t.Error("hook not unregistered when the lease ended")
	}
}

// A record put under another worker's key with its own worker id (which
// Register never writes) used to replace that worker under the new id,
// forged URL and all, past the instance checks. Follow takes it as
// invalid: the worker is dropped until its next heartbeat, the forged URL
// is never routed to.
func TestRecordUnderAnotherKeyIsInvalid(t *testing.T) {
	f, _ := newFixture(t, nil)
	ctx := ctxT(t)
	l, err := f.reg.Register(ctx, rec("w1", 16))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abandon()
	if n := f.next(t); n.Kind != fleet.Added {
		t.Fatalf("w1: %+v", n)
	}
	forged := rec("w1", 16)
	forged.ID, forged.URL = 12345, "http://127.0.0.1:6666"
	if err := f.reg.Bucket().Put(ctx, RecordKey(fleet.DeriveID("w1")), forged); err != nil {
		t.Fatal(err)
	}
	if n := f.next(t); n.Kind != fleet.Removed || n.Worker.Record.ID != fleet.DeriveID("w1") {
		t.Fatalf("after the forged record: %+v", n)
	}
	if n := f.next(t); n.Kind != fleet.Added || n.Worker.Record.URL != "http://127.0.0.1:9000" {
		t.Fatalf("after w1's next heartbeat: %+v", n)
	}
	if st := f.dir.Stats(); st.Invalid != 1 {
		t.Fatalf("invalid %d, want 1", st.Invalid)
	}
}
