package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// removedMsg is the message internal/service logs when a registered
// worker leaves a router's fleet (deregistered or expired). The routers
// expose no removal counter, so the suite counts these log records.
const removedMsg = "worker deregistered or expired: removed, its blocks dropped"

// keptMsg is the message internal/fleet logs when a router keeps a worker
// whose registration lapsed during a NATS outage and came back from the
// same process (instance id).
const keptMsg = "worker registration lapsed during a NATS outage and came back from the same process: worker kept"

// removalTap records, per router and worker, when the router logged the
// worker's removal. It sits in front of the cluster's log handler.
type removalTap struct {
	mu   sync.Mutex
	at   map[removalKey][]time.Time
	kept map[removalKey][]time.Time // keptMsg records
	n    int
}

type removalKey struct {
	router int
	worker string
}

func newRemovalTap() *removalTap {
	return &removalTap{at: map[removalKey][]time.Time{}, kept: map[removalKey][]time.Time{}}
}

func (t *removalTap) recordKept(router int, worker string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := removalKey{router, worker}
	t.kept[k] = append(t.kept[k], at)
}

// keptSeen reports whether router logged that it kept worker within
// [from, to].
func (t *removalTap) keptSeen(router int, worker string, from, to time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.ContainsFunc(t.kept[removalKey{router, worker}], func(at time.Time) bool {
		return !at.Before(from) && !at.After(to)
	})
}

func (t *removalTap) record(router int, worker string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := removalKey{router, worker}
	t.at[k] = append(t.at[k], at)
	t.n++
}

// total is the number of removals any router logged so far.
func (t *removalTap) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// seen reports whether router logged worker's removal within [from, to].
func (t *removalTap) seen(router int, worker string, from, to time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.ContainsFunc(t.at[removalKey{router, worker}], func(at time.Time) bool {
		return !at.Before(from) && !at.After(to)
	})
}

// tapHandler passes every record on to inner and shows removal records,
// with the router and worker attributes, to tap.
type tapHandler struct {
	inner slog.Handler
	tap   *removalTap
	attrs []slog.Attr
}

var _ slog.Handler = (*tapHandler)(nil)

func (h *tapHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *tapHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == removedMsg || r.Message == keptMsg {
		router, worker := -1, ""
		look := func(a slog.Attr) bool {
			switch a.Key {
			case "router":
				if a.Value.Kind() == slog.KindInt64 {
					router = int(a.Value.Int64())
				}
			case "worker":
				worker = a.Value.String()
			}
			return true
		}
		for _, a := range h.attrs {
			look(a)
		}
		r.Attrs(look)
		switch {
		case router < 0 || worker == "":
		case r.Message == keptMsg:
			h.tap.recordKept(router, worker, r.Time)
		default:
			h.tap.record(router, worker, r.Time)
		}
	}
	return h.inner.Handle(ctx, r)
}

func (h *tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tapHandler{inner: h.inner.WithAttrs(as), tap: h.tap, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *tapHandler) WithGroup(name string) slog.Handler {
	return &tapHandler{inner: h.inner.WithGroup(name), tap: h.tap, attrs: h.attrs}
}

// expiry is a worker registration that certainly expired during a
// schedule: no heartbeat reached the bucket for longer than the TTL
// between from and back (when the worker's record was put again).
type expiry struct {
	worker string
	cause  string
	from   time.Time
	back   time.Time
	// kept: the registration lapsed because NATS was down (nobody's
	// heartbeats got through) and came back from the same process, so
	// every router that listed the worker must keep it (log keptMsg and
	// no removal) rather than remove it.
	kept bool
	// knew holds the routers that listed the worker when its heartbeats
	// stopped, with the router process's generation then: a router
	// restarted since never had the old registration to remove.
	knew map[int]uint64
}

// expiryGrace bounds how long after the record came back a router may log
// the removal (its watcher reports an expiry within about 1.25 TTL, and a
// missed one at the re-read after the reconnect).
const expiryGrace = 10 * time.Second

// knowers returns the routers that list the worker now, with their
// process generations.
func (c *cluster) knowers(name string) map[int]uint64 {
	out := map[int]uint64{}
	for _, r := range c.routers {
		gen := r.gen.Load()
		svc := r.service()
		if svc == nil {
			continue
		}
		for _, w := range svc.Workers() {
			if w.Name == name {
				out[r.k] = gen
			}
		}
	}
	return out
}

func (c *cluster) addExpiry(e expiry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expiries = append(c.expiries, e)
}

// expiriesSeen checks the invariant: every router that listed a worker
// when its registration expired, and ran on without a restart, logged the
// worker's removal between the expiry and expiryGrace after the worker
// registered again; for a registration that lapsed in a NATS outage and
// came back from the same process (kept), it logged that it kept the
// worker and no removal. skipped counts (expiry, router) pairs without the
// removal where the router restarted since (its process may have been
// stopped before it logged the removal; the new one never had the old
// registration).
func (c *cluster) expiriesSeen() (ok bool, detail string, checked, skipped int) {
	c.mu.Lock()
	es := slices.Clone(c.expiries)
	c.mu.Unlock()
	for _, e := range es {
		for k, gen := range e.knew {
			if e.kept {
				to := e.back.Add(expiryGrace)
				if c.routers[k].gen.Load() != gen {
					skipped++
					continue
				}
				if c.abandonedIn(e.worker, e.from, to) {
					// A later fault (a crash, stopped heartbeats) ended
					// the registration before the routers could see it
					// come back: whether it was kept first is not
					// determined, and its removal is that fault's.
					skipped++
					continue
				}
				if c.removals.seen(k, e.worker, e.from, to) {
					return false, fmt.Sprintf("router %d removed %s, whose registration lapsed in a NATS outage (%s) and came back from the same process, from %s to %s",
						k, e.worker, e.cause, e.from.Format("15:04:05.000"), e.back.Format("15:04:05.000")), checked, skipped
				}
				if !c.removals.keptSeen(k, e.worker, e.from, to) {
					return false, fmt.Sprintf("router %d never logged that it kept %s, whose registration lapsed in a NATS outage (%s) from %s to %s",
						k, e.worker, e.cause, e.from.Format("15:04:05.000"), e.back.Format("15:04:05.000")), checked, skipped
				}
				checked++
				continue
			}
			if !c.removals.seen(k, e.worker, e.from, e.back.Add(expiryGrace)) {
				if c.routers[k].gen.Load() != gen {
					skipped++ // stopped before it logged the removal, maybe
					continue
				}
				return false, fmt.Sprintf("router %d never removed %s, whose registration expired (%s) from %s to %s",
					k, e.worker, e.cause, e.from.Format("15:04:05.000"), e.back.Format("15:04:05.000")), checked, skipped
			}
			checked++
		}
	}
	return true, "", checked, skipped
}

// abandon notes that a registration of worker name was abandoned now.
func (c *cluster) abandon(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned == nil {
		c.abandoned = map[string][]time.Time{}
	}
	c.abandoned[name] = append(c.abandoned[name], time.Now())
}

// abandonedIn reports whether a registration of worker name was abandoned
// in (from, to).
func (c *cluster) abandonedIn(name string, from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, at := range c.abandoned[name] {
		if at.After(from) && at.Before(to) {
			return true
		}
	}
	return false
}

// registrationsFresh reports whether every running worker's registry
// record is present and was put less than the TTL ago (its heartbeats
// reach the bucket).
func (c *cluster) registrationsFresh(ctx context.Context) (bool, string) {
	if c.nc == nil {
		return true, ""
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	js, err := jetstream.New(c.nc)
	if err != nil {
		return false, err.Error()
	}
	kv, err := js.KeyValue(ctx, registry.DefaultRegistryConfig().Bucket)
	if err != nil {
		return false, fmt.Sprintf("registry bucket: %v", err)
	}
	for _, w := range c.workers {
		if !w.running() {
			return false, w.name + " is down"
		}
		e, err := kv.Get(ctx, registry.RecordKey(kvevent.WorkerID(w.id)))
		if err != nil {
			return false, fmt.Sprintf("%s's registration: %v", w.name, err)
		}
		if age := time.Since(e.Created()); age >= c.ttl() {
			return false, fmt.Sprintf("%s's registration is %v old", w.name, age.Round(time.Millisecond))
		}
	}
	return true, ""
}

// settleWindow is how long the cluster must stay ready, with no router
// removing a worker and no router restarting, before the heal counts as
// done on the NATS plane. A router's registry watcher reports a record
// whose heartbeats it no longer sees as expired within TTL + TTL/4 (its
// expiry tick) of the last heartbeat it saw: a router ready through the
// whole window has seen fresh heartbeats of every worker, so no removal
// of an outage's expired registration is still pending.
func (c *cluster) settleWindow() time.Duration { return c.ttl() + c.ttl()/2 }

// settled is the heal's steady-state condition (poll it): every router
// ready with every worker EXACT (ready), every registration fresh, and on
// the NATS plane all of that held for settleWindow without a removal or a
// router start in between.
func (c *cluster) settled(ctx context.Context) func() (bool, string) {
	var since time.Time
	var removals int
	var gens uint64
	return func() (bool, string) {
		ok, detail := c.ready()
		if ok {
			ok, detail = c.registrationsFresh(ctx)
		}
		if !ok || !c.cfg.nats {
			since = time.Time{}
			return ok, detail
		}
		n, g := c.removals.total(), c.routerGens()
		if since.IsZero() || n != removals || g != gens {
			since, removals, gens = time.Now(), n, g
		}
		if d := time.Since(since); d < c.settleWindow() {
			return false, fmt.Sprintf("ready for %v of %v", d.Round(time.Millisecond), c.settleWindow())
		}
		return true, ""
	}
}

// routerGens sums the routers' process generations (it changes whenever
// one starts).
func (c *cluster) routerGens() uint64 {
	var n uint64
	for _, r := range c.routers {
		n += r.gen.Load()
	}
	return n
}
