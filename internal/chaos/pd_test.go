package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// Disaggregated schedules: the fleet is split into prefill-role and
// decode-role mock workers and the routers are the PD proxy (docs/pd.md).
// Every schedule starts by crashing a prefill and then a decode worker
// under load (mid-request: the prefill one while it keeps a finished
// prompt's blocks for a decode worker when the load gives it one), on
// the NATS plane restarts NATS next, then draws the remaining faults as
// every schedule does. On top of the common invariants (indexes converge,
// nothing vanished, bookings on both hops drain, certain expiries
// logged) it checks that no prefill worker still keeps blocks for a
// finished request once the hold timeout has passed.

// pdHoldTimeout is the prefill mockers' --kv-hold-timeout here: short, so
// that blocks a crashed decode worker never pulled are freed within the
// schedule.
const pdHoldTimeout = 1500 * time.Millisecond

// pdTransferTimeout is the decode mockers' wait for the prefill side;
// below the load's client deadline, so that a decode worker waiting on a
// restarted prefill worker's empty SGLang room still answers in time.
const pdTransferTimeout = time.Second

// pdConfig disaggregates a cluster.
type pdConfig struct {
	prefill  int    // workers 0..prefill-1 are prefill-role, the rest decode-role
	protocol string // vllm or sglang (the routers' --pd-protocol, the mockers' --disaggregation-protocol)
}

func (p *pdConfig) String() string {
	return fmt.Sprintf("PD %s (%d prefill)", p.protocol, p.prefill)
}

// newPDSchedule is a disaggregated schedule: at least 4 workers, 2 of
// them prefill-role; the protocol is drawn from the seed.
func newPDSchedule(seed uint64, steps int, nats bool) schedule {
	s := newSchedule(seed, steps)
	if nats {
		s = newNATSSchedule(seed, steps)
	}
	rng := rand.New(rand.NewPCG(seed, 5))
	s.workers = max(s.workers, 4)
	s.pd = &pdConfig{prefill: 2, protocol: []string{server.ProtocolVLLM, server.ProtocolSGLang}[rng.IntN(2)]}
	return s
}

// pdFault is a forced step of a PD schedule.
type pdFault struct {
	fault fault
	role  fleet.Role // the role of the worker it hits (crashes)
}

// forced returns step's forced fault: a prefill crash, a decode crash,
// then (NATS plane) a NATS restart. false for a drawn step, and always
// for a cluster that is not disaggregated.
func (p *pdConfig) forced(step int, nats bool) (pdFault, bool) {
	if p == nil {
		return pdFault{}, false
	}
	switch {
	case step == 0:
		return pdFault{faultWorkerCrash, fleet.RolePrefill}, true
	case step == 1:
		return pdFault{faultWorkerCrash, fleet.RoleDecode}, true
	case step == 2 && nats:
		return pdFault{fault: faultNATSRestart}, true
	}
	return pdFault{}, false
}

// role is the worker's role and SGLang bootstrap port (its proxy's port,
// so that the decode side's pulls pass through the proxy's faults too);
// empty and 0 outside a disaggregated cluster.
func (w *worker) role() (fleet.Role, int) {
	p := w.c.cfg.pd
	switch {
	case p == nil:
		return "", 0
	case w.k >= p.prefill:
		return fleet.RoleDecode, 0
	case p.protocol == server.ProtocolSGLang:
		return fleet.RolePrefill, w.proxy.ln.Addr().(*net.TCPAddr).Port
	}
	return fleet.RolePrefill, 0
}

// disagg is the worker's mocker disaggregation settings.
func (w *worker) disagg() server.Disagg {
	d := server.DefaultDisagg()
	role, _ := w.role()
	switch role {
	case fleet.RolePrefill:
		d.Mode = server.ModePrefill
	case fleet.RoleDecode:
		d.Mode = server.ModeDecode
	default:
		return d
	}
	d.Protocol = w.c.cfg.pd.protocol
	d.HoldTimeout, d.TransferTimeout = pdHoldTimeout, pdTransferTimeout
	return d
}

// byRole returns the workers of role.
func (c *cluster) byRole(role fleet.Role) []*worker {
	var out []*worker
	for _, w := range c.workers {
		if r, _ := w.role(); r == role {
			out = append(out, w)
		}
	}
	return out
}

// injectPD applies a forced step: a crash of a worker of the step's role
// (a prefill worker preferably while it keeps blocks for a decode worker)
// held for a random while, or a drawn fault of the step's kind.
func (c *cluster) injectPD(ctx context.Context, pf pdFault, rng *rand.Rand, stalls *windows, stats *counters) error {
	if pf.fault != faultWorkerCrash {
		return c.inject(ctx, pf.fault, rng, stalls, stats)
	}
	ws := c.byRole(pf.role)
	w := ws[rng.IntN(len(ws))]
	if !w.running() {
		return c.restartWorker(ctx, w)
	}
	if pf.role == fleet.RolePrefill {
		// Wait a little for a kept prefill: the crash then cuts a
		// transfer a decode worker is about to make.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) && w.holds() == 0 {
			sleep(ctx, 2*time.Millisecond)
		}
		if w.holds() > 0 {
			stats.add("prefill worker crashed while keeping blocks for a decode worker", 1)
		}
	}
	w.stop()
	sleep(ctx, time.Duration(100+rng.IntN(500))*time.Millisecond)
	return c.restartWorker(ctx, w)
}

// holds is the worker's kept prefills (its table); 0 when it is down.
func (w *worker) holds() int {
	w.mu.Lock()
	srv := w.srv
	w.mu.Unlock()
	if srv == nil {
		return 0
	}
	return srv.Holds()
}

// heldRequests is how many finished requests the worker's engines keep
// blocks for; an error when it is down or does not answer.
func (w *worker) heldRequests(ctx context.Context) (int, error) {
	w.mu.Lock()
	srv := w.srv
	w.mu.Unlock()
	if srv == nil {
		return 0, fmt.Errorf("%s is down", w.name)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return srv.HeldRequests(ctx)
}

// orphanPrefill sends a prefill hop straight to the worker and never
// pulls its blocks: what a decode worker that died before its transfer
// leaves behind.
func (w *worker) orphanPrefill(ctx context.Context, prompt []uint32, room uint64) error {
	w.mu.Lock()
	u := w.url
	w.mu.Unlock()
	pd := `"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}`
	if w.c.cfg.pd.protocol == server.ProtocolSGLang {
		pd = fmt.Sprintf(`"bootstrap_room":%d`, room)
	}
	body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":1,%s}`, modelName, jsonInts(prompt), pd)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s orphan prefill: %s", w.name, resp.Status)
	}
	return nil
}

// checkHolds checks the PD invariant after the heal and the clean phase:
// once the hold timeout has passed, no prefill worker's engines keep
// blocks for a finished request (nor its table a hold). The positive
// signal first: an orphaned prefill on every prefill worker is seen kept,
// then freed by the timeout.
func (c *cluster) checkHolds(t *testing.T, stats *counters) {
	t.Helper()
	ctx := t.Context()
	// The routers took the disaggregated path (their processes since the
	// last restart served at least the clean phase).
	if n := c.pdRequests("disaggregated"); n == 0 {
		t.Errorf("no router sent a request over both hops (kvrouter_pd_requests_total{path=\"disaggregated\"} is 0)")
	} else {
		stats.add("requests over both hops (routers' current processes)", n)
	}
	prefills := c.byRole(fleet.RolePrefill)
	for i, w := range prefills {
		if err := w.orphanPrefill(ctx, prompts(1, c.cfg.seed*31+uint64(i))[0], c.cfg.seed+uint64(i)); err != nil {
			t.Errorf("orphan prefill: %v", err)
			return
		}
		if n, err := w.heldRequests(ctx); err != nil || n == 0 || w.holds() == 0 {
			t.Errorf("%s keeps %d requests' blocks (%d holds, err %v) right after an unpulled prefill answered: the hold check proves nothing",
				w.name, n, w.holds(), err)
			return
		}
	}
	poll.UntilState(t, pdHoldTimeout+10*time.Second, func() (bool, string) { return c.holdsFreed(ctx) },
		"every prefill worker freed every kept prefill after the hold timeout")
	stats.add("orphaned prefills freed by the hold timeout", len(prefills))
}

// holdsFreed reports whether no prefill worker's engines keep blocks for
// a finished request and no table keeps a hold.
func (c *cluster) holdsFreed(ctx context.Context) (bool, string) {
	for _, w := range c.byRole(fleet.RolePrefill) {
		n, err := w.heldRequests(ctx)
		if err != nil {
			return false, err.Error()
		}
		if h := w.holds(); n > 0 || h > 0 {
			return false, fmt.Sprintf("%s keeps blocks for %d finished requests (%d holds)", w.name, n, h)
		}
	}
	return true, ""
}

// TestHoldCheckCanFail is the PD invariant's negative control: a prefill
// nobody pulls is reported kept until its hold timeout frees it.
func TestHoldCheckCanFail(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet")
	}
	c, err := newCluster(clusterConfig{workers: 3, routers: 1, kvBlocks: 160, seed: 11, dataDir: t.TempDir(),
		pd: &pdConfig{prefill: 1, protocol: server.ProtocolVLLM}}, &logBuf{}, newCounters())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	poll.UntilState(t, 15*time.Second, func() (bool, string) { return c.ready() }, "routers ready")
	ctx := t.Context()
	if ok, detail := c.holdsFreed(ctx); !ok {
		t.Fatalf("a fresh fleet keeps blocks: %s", detail)
	}
	start := time.Now()
	if err := c.workers[0].orphanPrefill(ctx, prompts(1, 11)[0], 0); err != nil {
		t.Fatal(err)
	}
	if ok, _ := c.holdsFreed(ctx); ok && time.Since(start) < pdHoldTimeout {
		t.Fatal("an unpulled prefill's kept blocks went unnoticed")
	}
	poll.UntilState(t, pdHoldTimeout+10*time.Second, func() (bool, string) { return c.holdsFreed(ctx) }, "the hold timeout frees the orphan")
	if d := time.Since(start); d < pdHoldTimeout {
		t.Errorf("the orphan was freed after %v, before the %v hold timeout", d, pdHoldTimeout)
	}
}

// TestChaosPDShort is the deterministic gate's disaggregated schedule:
// one short schedule on the NATS plane (prefill and decode crashes, a
// NATS restart, then drawn faults).
func TestChaosPDShort(t *testing.T) {
	if testing.Short() {
		t.Skip("fault schedules take tens of seconds")
	}
	var rs []result
	for _, seed := range seeds(1) {
		rs = append(rs, runSchedule(t, newPDSchedule(seed, 5, true)))
	}
	report(t, rs)
}

// pdRequests sums kvrouter_pd_requests_total{path} over the routers'
// current processes.
func (c *cluster) pdRequests(path string) int {
	n := 0.0
	for _, r := range c.routers {
		r.mu.Lock()
		reg := r.reg
		r.mu.Unlock()
		if reg == nil {
			continue
		}
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "kvrouter_pd_requests_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "path" && l.GetValue() == path {
						n += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return int(n)
}
