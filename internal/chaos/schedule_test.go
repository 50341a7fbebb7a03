package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/poll"
)

var (
	flagSeed      = flag.Uint64("chaos.seed", 0, "replay one schedule with this seed (0: the fixed seeds, or fresh ones with -chaos.fresh)")
	flagFresh     = flag.Bool("chaos.fresh", false, "draw the schedules' seeds from the clock (make chaos) instead of the fixed seeds of the gate")
	flagSchedules = flag.Int("chaos.schedules", 0, "number of schedules of the long suite (0: its default)")
	flagKeepLogs  = flag.Bool("chaos.logs", false, "write every schedule's full logs to $TMPDIR/kvrouter-chaos-SEED.log, passed or not")
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-zeromq/zmq4 v0.17.0: a closed PUB socket's writer goroutine
		// stays parked on a condition variable Close never signals (see
		// internal/eventplane/vllmzmq). Not ours.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}

// fault is one kind of failure a schedule can inject.
type fault int

const (
	faultWorkerCrash    fault = iota // worker process stops (connections cut), restarts later on the same ports
	faultEvents                      // a worker's event batches dropped live / duplicated / delayed
	faultEngineReset                 // engine sequence restarts at 0 with its cache cleared
	faultRouterRestart               // a router stops (graceful) and starts again on the same address
	faultStall                       // a worker stops answering HTTP mid-stream, then resumes
	faultCut                         // every connection to a worker reset (process stays up)
	faultNATSRestart                 // the NATS server stops and starts again on its port (nats plane)
	faultRegistryExpire              // a worker's registration expires, then it registers again (nats plane)
	numFaults
)

var faultNames = [...]string{"worker crash+restart", "event loss/dup/delay", "engine sequence reset",
	"router restart", "worker stalls mid-stream", "connections reset", "NATS server restart", "registry entry expires"}

// schedule is a seeded plan: cluster shape and the faults in order.
type schedule struct {
	seed    uint64
	workers int
	routers int
	steps   int
	clients int
	// nats, durable, replica: the routers' event plane (see clusterConfig).
	nats, durable, replica bool
	// pd, when set, disaggregates the fleet (pd_test.go).
	pd *pdConfig
}

func newSchedule(seed uint64, steps int) schedule {
	rng := rand.New(rand.NewPCG(seed, 1))
	return schedule{seed: seed, workers: 3 + rng.IntN(3), routers: 1 + rng.IntN(3), steps: steps, clients: 6 + rng.IntN(10)}
}

// newNATSSchedule is a schedule on the NATS event plane; durable mode and
// replica sync are drawn from the seed.
func newNATSSchedule(seed uint64, steps int) schedule {
	s := newSchedule(seed, steps)
	rng := rand.New(rand.NewPCG(seed, 4))
	s.nats, s.durable, s.replica = true, rng.IntN(2) == 0, rng.IntN(2) == 0
	return s
}

func (s schedule) String() string {
	plane := "engine ZMQ"
	if s.nats {
		plane = fmt.Sprintf("NATS (durable %v, replica sync %v)", s.durable, s.replica)
	}
	if s.pd != nil {
		plane += ", " + s.pd.String()
	}
	return fmt.Sprintf("%d workers, %d routers, %d clients, %s", s.workers, s.routers, s.clients, plane)
}

// result is what one schedule survived.
type result struct {
	faults   map[string]int
	requests map[outcome]int
	// convergedMS is how long after the heal every router's index
	// equalled the engines' caches (routers ready, clean phase included).
	convergedMS int
}

// runSchedule runs one schedule against a fresh cluster and checks every
// invariant; on failure it prints the seed and the logs' tail.
func runSchedule(t *testing.T, s schedule) result {
	t.Helper()
	var res result
	ok := t.Run(fmt.Sprintf("seed=%d", s.seed), func(t *testing.T) {
		logs := &logBuf{}
		stats := newCounters()
		var stacks strings.Builder
		defer func() {
			if t.Failed() || *flagKeepLogs {
				if t.Failed() {
					t.Logf("REPLAY: go test -tags chaos -race -run '^%s$' ./internal/chaos/ -chaos.seed=%d", strings.Split(t.Name(), "/")[0], s.seed)
					t.Logf("logs (tail):\n%s", logs.tail(20000))
				}
				path := filepath.Join(os.TempDir(), fmt.Sprintf("kvrouter-chaos-%d.log", s.seed))
				if err := os.WriteFile(path, []byte(logs.tail(64<<20)+"\n\nGOROUTINES AT FAILURE\n"+stacks.String()), 0o644); err == nil {
					t.Logf("full logs: %s", path)
				}
			}
		}()
		c, err := newCluster(clusterConfig{workers: s.workers, routers: s.routers, kvBlocks: 160, seed: s.seed,
			dataDir: t.TempDir(), nats: s.nats, durable: s.durable, replicaSync: s.replica, pd: s.pd}, logs, stats)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		defer func() { // before c.close: the stacks while everything still runs
			if t.Failed() {
				_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			}
		}()
		poll.UntilState(t, 15*time.Second, func() (bool, string) { return c.ready() }, "routers ready")

		stalls := &windows{}
		l := newLoad(c, s.seed, 2500*time.Millisecond, stalls)
		l.run(s.clients, s.seed)
		halted := false
		defer func() {
			if !halted {
				l.halt()
			}
		}()
		rng := rand.New(rand.NewPCG(s.seed, 2))
		ctx := t.Context()
		for step := range s.steps {
			f := fault(rng.IntN(int(numFaults)))
			if f >= faultNATSRestart && !s.nats {
				f = faultEvents
			}
			var err error
			if pf, ok := s.pd.forced(step, s.nats); ok {
				f = pf.fault
				c.log.Info("CHAOS step", "step", step, "fault", faultNames[f], "target", pf.role)
				err = c.injectPD(ctx, pf, rng, stalls, stats)
			} else {
				c.log.Info("CHAOS step", "step", step, "fault", faultNames[f])
				err = c.inject(ctx, f, rng, stalls, stats)
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, faultNames[f], err)
			}
			stats.add("fault: "+faultNames[f], 1)
		}
		// Heal: every event fault off, every process up, no stall.
		if c.bus != nil && c.bus.srv == nil {
			if err := c.bus.start(); err != nil {
				t.Fatal(err)
			}
		}
		for k, w := range c.workers {
			w.setFaults(eventFaults{})
			w.proxy.stall(false)
			stalls.end(k)
			if !w.running() {
				if err := c.restartWorker(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
		}
		c.log.Info("CHAOS healed: every fault off, every process up")
		var outs map[outcome]int
		var errs []string
		res.convergedMS, outs, errs = checkHealed(t, c, l, s.seed, stats)
		halted = true
		if s.pd != nil {
			c.checkHolds(t, stats)
		}
		res.faults, res.requests = stats.snapshot(), outs
		t.Logf("seed %d: %v; converged %d ms after heal; requests %v; %v; first errors: %s",
			s.seed, s, res.convergedMS, outs, stats.snapshot(), strings.Join(errs, " | "))
	})
	if !ok {
		t.Fatalf("schedule failed; replay with -chaos.seed=%d", s.seed)
	}
	return res
}

// checkHealed checks every invariant after the last fault of a schedule
// was healed (every process up, every fault off): steady state, then the
// load l halted, a clean phase in which no request may fail, every
// certain expiry logged, indexes equal to the engines' caches, bookings
// drained, no request vanished. It returns how long after the call the
// indexes converged, and the load's outcomes and first errors.
func checkHealed(t *testing.T, c *cluster, l *load, seed uint64, stats *counters) (convergedMS int, outs map[outcome]int, errs []string) {
	t.Helper()
	ctx := t.Context()
	healed := time.Now()
	// Steady state, not a passing glance: after a NATS outage a router
	// may still be about to drop (and re-add) a worker whose
	// registration expired meanwhile.
	poll.UntilState(t, 20*time.Second, c.settled(ctx), "routers ready, every worker routable and every registration fresh after the last fault")
	l.halt()

	// After the last fault: a clean phase in which nothing may fail.
	clean := newLoad(c, seed+1, 10*time.Second, &windows{})
	for i := range 3 * len(c.routers) * 4 {
		r := c.routers[i%len(c.routers)]
		if o, detail := clean.do(r.url(), clean.prompts[i%len(clean.prompts)], 4); o != outOK {
			t.Errorf("request %d after the last fault via router %d: %s: %s", i, r.k, o, detail)
		}
	}
	clean.client.CloseIdleConnections()

	// Every router removed every worker whose registration expired
	// (even though it registered again since).
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		ok, detail, _, _ := c.expiriesSeen()
		return ok, detail
	}, "every router removed every expired registration")
	if _, _, checked, skipped := c.expiriesSeen(); checked+skipped > 0 {
		stats.add("expired registrations seen removed (router × expiry)", checked)
		stats.add("expired registrations not checkable (router restarted before logging a removal)", skipped)
	}

	// Index equals the engines' caches within a bound. A batch lost at
	// the very end of a stream is invisible until a later batch shows
	// the gap (as with vLLM), so each failed poll nudges the engines
	// with one direct request.
	nudge := uint64(0)
	poll.UntilState(t, 20*time.Second, func() (bool, string) {
		okIdx, detail := c.indexMatches()
		if !okIdx {
			nudge++
			for _, w := range c.workers {
				_ = w.direct(ctx, prompts(1, seed*977+nudge)[0])
			}
		}
		return okIdx, detail
	}, "every router's index equals the engines' caches")
	convergedMS = int(time.Since(healed).Milliseconds())
	if n := cachedBlocks(c); n == 0 {
		t.Error("no engine caches anything: the index comparison proves nothing")
	}
	// With replica sync, a Free lost while NATS was down is repaired by
	// the snapshot refetch on reconnect (internal/replica), so bookings
	// must drain here too.
	poll.UntilState(t, 15*time.Second, func() (bool, string) { return c.noBookings() }, "every booking freed")

	outs, errs = l.counts()
	total := 0
	for _, n := range outs {
		total += n
	}
	if int64(total) != l.sent.Load() {
		t.Errorf("%d requests sent, %d outcomes counted: some vanished", l.sent.Load(), total)
	}
	if outs[outVanished] > 0 {
		t.Errorf("%d requests hit the client deadline with no stalled worker (vanished); first errors: %s",
			outs[outVanished], strings.Join(errs, " | "))
	}
	if outs[outOK] == 0 {
		t.Errorf("no request succeeded during the schedule: %v", outs)
	}
	return convergedMS, outs, errs
}

// inject applies one fault, holds it for a random while with the load
// running, and heals what must be healed for the next step.
func (c *cluster) inject(ctx context.Context, f fault, rng *rand.Rand, stalls *windows, stats *counters) error {
	hold := time.Duration(100+rng.IntN(500)) * time.Millisecond
	k := rng.IntN(len(c.workers))
	w := c.workers[k]
	switch f {
	case faultWorkerCrash:
		if !w.running() {
			return c.restartWorker(ctx, w)
		}
		w.stop()
		sleep(ctx, hold)
		return c.restartWorker(ctx, w)
	case faultEvents:
		ef := eventFaults{}
		switch rng.IntN(4) {
		case 0:
			ef.drop = 0.1 + 0.4*rng.Float64()
		case 1:
			ef.dup = 0.1 + 0.4*rng.Float64()
		case 2:
			ef.delay = time.Duration(5+rng.IntN(200)) * time.Millisecond
		default:
			ef = eventFaults{drop: 0.2 * rng.Float64(), dup: 0.2 * rng.Float64(), delay: time.Duration(rng.IntN(50)) * time.Millisecond}
		}
		w.setFaults(ef)
		sleep(ctx, hold)
		if rng.IntN(2) == 0 { // half the time the fault outlives the step
			w.setFaults(eventFaults{})
		}
	case faultEngineReset:
		if !w.running() {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := w.resetEngine(rctx); err != nil {
			stats.add("engine reset skipped (requests never drained)", 1)
		}
		sleep(ctx, hold)
	case faultRouterRestart:
		r := c.routers[rng.IntN(len(c.routers))]
		exited := r.exited.Load()
		if err := r.stop(); err != nil && !exited {
			return fmt.Errorf("router %d stop: %w", r.k, err)
		}
		if exited {
			stats.add("router exited on its own (restarted, as a supervisor would)", 1)
		}
		sleep(ctx, hold)
		return r.start()
	case faultStall:
		stalls.begin(k)
		w.proxy.stall(true)
		sleep(ctx, time.Duration(300+rng.IntN(3000))*time.Millisecond)
		w.proxy.stall(false)
		stalls.end(k)
	case faultCut:
		w.proxy.cut()
		sleep(ctx, hold)
	case faultNATSRestart:
		if rng.IntN(3) == 0 { // an outage past the TTL: every registration expires
			hold += c.ttl() + time.Duration(rng.IntN(500))*time.Millisecond
		}
		return c.restartNATS(ctx, hold)
	case faultRegistryExpire:
		return w.expire(ctx, hold)
	}
	return nil
}

// restartWorker starts a crashed worker again and sends it one direct
// request: vLLM publishes nothing at start, so until the new process
// stores a block the routers cannot know its cache is empty (that request
// stands for the engine's first traffic).
func (c *cluster) restartWorker(ctx context.Context, w *worker) error {
	if err := w.start(); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		err := w.direct(rctx, prompts(1, uint64(time.Now().UnixNano()))[0])
		if err == nil {
			return nil
		}
		if rctx.Err() != nil {
			return fmt.Errorf("%s after restart: %w", w.name, err)
		}
		sleep(rctx, 20*time.Millisecond)
	}
}

// ready reports whether every router is up, ready, and sees every worker
// as routable and EXACT.
func (c *cluster) ready() (bool, string) {
	for _, r := range c.routers {
		if r.exited.Load() {
			// kvrouter exits when it cannot start (e.g. NATS went away
			// mid-start); its supervisor starts it again.
			_ = r.stop()
			c.stats.add("router exited on its own (restarted, as a supervisor would)", 1)
			if err := r.start(); err != nil {
				return false, fmt.Sprintf("router %d: restart after exit: %v", r.k, err)
			}
		}
		svc := r.service()
		if svc == nil {
			return false, fmt.Sprintf("router %d down", r.k)
		}
		if err := svc.Ready(); err != nil {
			return false, fmt.Sprintf("router %d: %v", r.k, err)
		}
		if n := len(svc.Workers()); n != len(c.workers) {
			return false, fmt.Sprintf("router %d knows %d of %d workers", r.k, n, len(c.workers))
		}
		for _, w := range svc.Workers() {
			if w.Status.State != fleet.StateExact {
				return false, fmt.Sprintf("router %d: %s is %s (%s)", r.k, w.Name, w.Status.State, w.Status.Reason)
			}
		}
	}
	return true, ""
}

func cachedBlocks(c *cluster) int {
	n := 0
	for _, w := range c.workers {
		t, _ := w.truth()
		n += len(t)
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// gateSeedBase is the first seed of every suite without -chaos.fresh:
// the gate (make test) runs the same schedules each time, so a red run
// is a change's doing or a flake to fix, never a new schedule drawn that
// day. Exploration is make chaos (-chaos.fresh).
const gateSeedBase = 1

// seeds returns the schedule seeds: the replay seed alone, or n seeds
// from a base: CHAOS_SEED_BASE if set, else the clock with -chaos.fresh,
// else gateSeedBase.
func seeds(n int) []uint64 {
	if *flagSeed != 0 {
		return []uint64{*flagSeed}
	}
	base := uint64(gateSeedBase)
	if *flagFresh {
		base = uint64(time.Now().UnixNano())
	}
	if v := os.Getenv("CHAOS_SEED_BASE"); v != "" {
		fmt.Sscan(v, &base)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)*0x9e3779b97f4a7c15
		if out[i] == 0 {
			out[i] = 1
		}
	}
	return out
}

// summarize totals several schedules' results.
func summarize(rs []result) (faults map[string]int, reqs map[outcome]int, names []string, maxMS int) {
	faults, reqs = map[string]int{}, map[outcome]int{}
	for _, r := range rs {
		maxMS = max(maxMS, r.convergedMS)
		for k, v := range r.faults {
			faults[k] += v
		}
		for k, v := range r.requests {
			reqs[k] += v
		}
	}
	for k := range faults {
		names = append(names, k)
	}
	slices.Sort(names)
	return faults, reqs, names, maxMS
}

// report logs a suite's totals (the figures docs/benchmarks.md records).
func report(t *testing.T, rs []result) {
	faults, reqs, names, maxMS := summarize(rs)
	total := 0
	for _, n := range names {
		t.Logf("%s: %d", n, faults[n])
		if strings.HasPrefix(n, "fault: ") {
			total += faults[n]
		}
	}
	t.Logf("SUMMARY: %d schedules, %d faults survived, slowest convergence %d ms after heal; requests %v", len(rs), total, maxMS, reqs)
}

// TestChaosShort is the CI variant: two short seeded schedules.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("fault schedules take tens of seconds")
	}
	var rs []result
	for _, seed := range seeds(2) {
		rs = append(rs, runSchedule(t, newSchedule(seed, 6)))
	}
	report(t, rs)
}

// TestChaosServiceNATSShort is the CI variant on the NATS event plane
// (registry discovery, durable mode and replica sync drawn from the seed).
func TestChaosServiceNATSShort(t *testing.T) {
	if testing.Short() {
		t.Skip("fault schedules take tens of seconds")
	}
	var rs []result
	for _, seed := range seeds(2) {
		s := newNATSSchedule(seed, 6)
		rs = append(rs, runSchedule(t, s))
	}
	report(t, rs)
}
