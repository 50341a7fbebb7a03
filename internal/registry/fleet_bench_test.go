package registry

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus"
)

// processCPU returns the process's CPU time (user + system).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRegistryFleet registers N workers (64, 256, 1,024; the default
// 10 s TTL, so N/3.3 heartbeats a second) in an embedded NATS server and
// times what a router starting then does: open a watch and apply the
// bucket's records to a fresh directory until the initial values are in
// (ns/op, "ready-ms"). It reports how long registering took, and the
// CPU the process spends (NATS server, leases, watcher and directory
// together, on 2 cores) over 5 s with the heartbeats alone and with one
// router following them, as a share of one core.
func BenchmarkRegistryFleet(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) { benchRegistryFleet(b, n) })
	}
}

func benchRegistryFleet(b *testing.B, n int) {
	c := natsbus.DefaultConfig()
	c.Port = -1
	c.DataDir = b.TempDir()
	bus, err := natsbus.Start(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { bus.Shutdown(); bus.WaitForShutdown() }()
	ctx := context.Background()
	reg, err := OpenRegistry(ctx, bus.JetStream(), DefaultRegistryConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	leases := make([]*Lease[fleet.WorkerRecord], n)
	for i := range leases {
		if leases[i], err = reg.Register(ctx, rec(fmt.Sprint("worker-", i), 16)); err != nil {
			b.Fatal(err)
		}
	}
	registered := time.Since(t0)
	defer func() {
		for _, l := range leases {
			_ = l.Close(ctx)
		}
	}()
	expect := fleet.Expect{BlockSize: 16, Hash: fleet.DefaultHashContract()}
	// follow starts a router's view of the registry and returns when the
	// initial records are applied, with a stop function.
	follow := func() (*fleet.Directory, func()) {
		dir, _, err := fleet.NewDirectory(expect, nil, nil, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		w, err := reg.Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		synced := make(chan struct{})
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { Follow(fctx, dir, w, func(fleet.Notification) {}, func() { close(synced) }) })
		select {
		case <-synced:
		case <-time.After(60 * time.Second):
			b.Fatal("the watch did not sync within 60 s")
		}
		return dir, func() { cancel(); w.Stop(); wg.Wait() }
	}
	for b.Loop() {
		dir, stop := follow()
		b.StopTimer()
		if got := len(dir.Workers()); got != n {
			b.Fatalf("%d workers in the directory after sync, want %d", got, n)
		}
		stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ready-ms")
	b.StopTimer()
	b.ReportMetric(float64(registered.Milliseconds()), "register-ms")
	const window = 5 * time.Second
	cpu := func() float64 {
		c0, t := processCPU(b), time.Now()
		time.Sleep(window)
		return 100 * float64(processCPU(b)-c0) / float64(time.Since(t))
	}
	b.ReportMetric(cpu(), "heartbeats-cpu-%")
	_, stop := follow()
	b.ReportMetric(cpu(), "watching-cpu-%")
	stop()
}
