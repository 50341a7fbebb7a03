package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Querier sends one recovery request to the worker rank it names and
// returns the assembled reply. It is the transport's half of recovery (NATS
// request/reply, a ZMQ DEALER). It must honour ctx and be safe for
// concurrent use.
type Querier interface {
	Query(ctx context.Context, req Request) (Reply, error)
}

// Applier receives the events to fold into the router's index, in order per
// worker rank; a Cleared event drops every block of its worker rank. It
// must be safe for concurrent use (router.Router is).
type Applier interface {
	ApplyEvent(ev kvevent.Event) error
}

// StateFunc is told when a worker's event state changes: EXACT once every
// rank is recovered and events flow in order, DEGRADED with a reason while
// a rank recovers or after a recovery failed. It is called from the
// tracker's goroutines, one call at a time; it must return quickly. The
// service maps it onto fleet.Directory.SetStatus.
type StateFunc func(id kvevent.WorkerID, state fleet.State, reason string)

// Config tunes a Tracker.
type Config struct {
	// QueryTimeout bounds one recovery query (a dump included). Default 10 s.
	QueryTimeout time.Duration
	// RetryWait is the first pause before retrying a failed recovery; it
	// doubles up to MaxRetryWait. Default 500 ms.
	RetryWait time.Duration
	// MaxRetryWait caps the retry pause. Default 30 s.
	MaxRetryWait time.Duration
	// MaxHeld is how many live events a rank holds while its query runs
	// before it falls back to a dump. Default 65536.
	MaxHeld int
	// Inbox is each rank's queue of live events. Default 4096.
	Inbox int
	// AcceptUnknown follows publishers that discovery never announced (a
	// Dynamo worker publishing on the subject): their events are applied
	// and recovery is attempted like for any worker, for at most
	// MaxUnknown such ranks. Default false: events of a worker rank that
	// was not added (from its registry record or the static list) are
	// dropped and counted (kvrouter_eventplane_events_dropped_total), and
	// nothing is kept for them. Anyone allowed to publish on the events
	// subject can make up worker ids; an honest worker loses nothing, as
	// the dump asked for when it is added covers what was dropped before.
	AcceptUnknown bool
	// MaxUnknown caps the worker ranks AcceptUnknown follows before they
	// are added (each costs a goroutine, its inbox and held events); past
	// it their events are dropped and counted. Default 64.
	MaxUnknown int
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{QueryTimeout: 10 * time.Second, RetryWait: 500 * time.Millisecond, MaxRetryWait: 30 * time.Second,
		MaxHeld: DefaultMaxHeld, Inbox: 4096, MaxUnknown: 64}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.QueryTimeout <= 0 || c.RetryWait <= 0 || c.MaxRetryWait < c.RetryWait || c.MaxHeld <= 0 || c.Inbox <= 0 ||
		c.MaxUnknown < 0 {
		return fmt.Errorf("invalid recovery config %+v", c)
	}
	return nil
}

// Tracker runs one Stream per worker rank, each on its own goroutine: live
// events and query replies of a rank are handled in order, a slow dump of
// one worker never stalls another.
type Tracker struct {
	cfg    Config
	q      Querier
	a      Applier
	onSt   StateFunc
	m      *Metrics
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	ranks   map[kvevent.WorkerRank]*follower
	removed map[kvevent.WorkerID]bool   // AcceptUnknown: removed workers, late events ignored until Add
	unknown map[kvevent.WorkerRank]bool // AcceptUnknown: ranks followed from their events, not added
	drops   dropLog
	states  map[kvevent.WorkerID]map[kvevent.DPRank]string // "" = exact
	agg     map[kvevent.WorkerID]fleet.State
	closed  bool
	stateMu sync.Mutex
	wg      sync.WaitGroup
	// applyMu is read-held by a follower while it advances its Stream and
	// applies the step; Frozen write-holds it, so that every stream's
	// position matches what the index holds.
	applyMu sync.RWMutex
}

// Position is where one worker rank's stream stands: the last event id
// applied to the index and the publisher it came from (0: unknown).
type Position struct {
	Last, Publisher uint64
}

type input struct {
	ev     kvevent.Event
	pub    uint64
	resync bool
	mark   chan struct{} // closed once every earlier input is handled
}

type result struct {
	rep Reply
	err error
}

type follower struct {
	s      *Stream
	in     chan input
	cancel context.CancelFunc
	done   chan struct{}
}

// NewTracker returns a tracker applying to a and asking through q. onState
// and m may be nil; log may be nil.
func NewTracker(cfg Config, q Querier, a Applier, onState StateFunc, m *Metrics, log *slog.Logger) (*Tracker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Tracker{cfg: cfg, q: q, a: a, onSt: onState, m: m, log: log, ctx: ctx, cancel: cancel,
		ranks: map[kvevent.WorkerRank]*follower{}, removed: map[kvevent.WorkerID]bool{}, unknown: map[kvevent.WorkerRank]bool{},
		states: map[kvevent.WorkerID]map[kvevent.DPRank]string{},
		agg:    map[kvevent.WorkerID]fleet.State{}}, nil
}

// Add starts following worker rank w: its events must already be
// subscribed to; a dump is asked for at once. Adding a followed rank (one
// its live events made known first) reports the worker's current state
// again, for a caller that ignored the first report.
func (t *Tracker) Add(w kvevent.WorkerRank) {
	t.mu.Lock()
	delete(t.removed, w.ID)
	delete(t.unknown, w)
	known := t.ranks[w] != nil
	t.addLocked(w)
	t.mu.Unlock()
	if known {
		t.reannounce(w.ID)
	}
}

// reannounce tells onState the worker's current state, if it has one.
func (t *Tracker) reannounce(id kvevent.WorkerID) {
	t.stateMu.Lock()
	defer t.stateMu.Unlock()
	state, ok := t.agg[id]
	if !ok || t.onSt == nil {
		return
	}
	why := ""
	for r, rr := range t.states[id] {
		if rr != "" {
			why = fmt.Sprintf("rank %d: %s", r, rr)
			break
		}
	}
	t.onSt(id, state, why)
}

func (t *Tracker) addLocked(w kvevent.WorkerRank) *follower {
	if t.closed {
		return nil
	}
	if f := t.ranks[w]; f != nil {
		return f
	}
	return t.startLocked(NewStream(w, t.cfg.MaxHeld))
}

// startLocked starts following s's worker rank with s.
func (t *Tracker) startLocked(s *Stream) *follower {
	w := s.Worker()
	ctx, cancel := context.WithCancel(t.ctx)
	f := &follower{s: s, in: make(chan input, t.cfg.Inbox), cancel: cancel, done: make(chan struct{})}
	t.ranks[w] = f
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(f.done)
		t.run(ctx, f)
	}()
	return f
}

// Remove stops following every rank of worker id and drops their blocks;
// its late events are ignored until it is added again.
func (t *Tracker) Remove(id kvevent.WorkerID) {
	t.mu.Lock()
	if t.cfg.AcceptUnknown {
		t.removed[id] = true
	}
	var fs []*follower
	for w, f := range t.ranks {
		if w.ID == id {
			fs = append(fs, f)
			delete(t.ranks, w)
			delete(t.unknown, w)
		}
	}
	t.mu.Unlock()
	for _, f := range fs {
		f.cancel()
		<-f.done
		t.applyMu.RLock()
		t.apply(kvevent.Event{Worker: f.s.Worker(), Kind: kvevent.Cleared})
		t.applyMu.RUnlock()
	}
	t.stateMu.Lock()
	delete(t.states, id)
	delete(t.agg, id)
	t.stateMu.Unlock()
	if len(fs) > 0 {
		t.log.Info("event plane: worker removed, its blocks dropped", "worker_id", uint64(id), "ranks", len(fs))
	}
}

// Live feeds one live event from the transport; publisher is the
// envelope's publisher id (0 when unknown). It blocks while the rank's
// inbox is full. The event of a worker rank that was not added is dropped
// and counted (see Config.AcceptUnknown).
func (t *Tracker) Live(ev kvevent.Event, publisher uint64) {
	t.mu.Lock()
	f := t.ranks[ev.Worker]
	why := ""
	switch {
	case f != nil || t.closed:
	case !t.cfg.AcceptUnknown:
		why = DropUnknownWorker
	case t.removed[ev.Worker.ID]:
		why = DropRemovedWorker
	case len(t.unknown) >= t.cfg.MaxUnknown:
		why = DropUnknownLimit
	default:
		t.unknown[ev.Worker] = true
		f = t.addLocked(ev.Worker)
	}
	t.mu.Unlock()
	if why != "" {
		t.m.dropped(why)
		if n, ok := t.drops.note(time.Now()); ok {
			t.log.Warn("event plane: dropping KV events of worker ranks that were not added (not registered, or removed)",
				"reason", why, "worker", ev.Worker.String(), "dropped_since_last_log", n)
		}
		return
	}
	if f == nil {
		return
	}
	select {
	case f.in <- input{ev: ev, pub: publisher}:
	case <-t.ctx.Done():
	}
}

// Resync asks every rank for what it missed (after a reconnect).
func (t *Tracker) Resync() {
	t.mu.Lock()
	fs := make([]*follower, 0, len(t.ranks))
	for _, f := range t.ranks {
		fs = append(fs, f)
	}
	t.mu.Unlock()
	for _, f := range fs {
		select {
		case f.in <- input{resync: true}:
		case <-t.ctx.Done():
			return
		}
	}
}

// Resume starts following worker rank w after event last of publisher (0:
// unknown), as restored from a snapshot whose blocks the index already
// holds: instead of a dump, the rank is asked for the events after last
// (a dump comes back if they left its buffer, a restart is noticed by the
// answer). A rank already followed is left as it is.
func (t *Tracker) Resume(w kvevent.WorkerRank, last, publisher uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.ranks[w] != nil {
		return
	}
	delete(t.removed, w.ID)
	s := NewStream(w, t.cfg.MaxHeld)
	s.Resume(last, publisher)
	t.startLocked(s)
}

// Frozen waits until every live event fed before the call has been
// handled by its rank, then runs f while no rank advances or applies
// anything, with the position of every rank that applied an event: what
// the index holds is exactly those positions (plus ranks synced without an
// event yet, and blocks a rank's recovery cleared and replayed). The
// durable consumer snapshots the index in f. It returns ctx's error if ctx
// ends first (f is then not run).
func (t *Tracker) Frozen(ctx context.Context, f func(map[kvevent.WorkerRank]Position)) error {
	t.mu.Lock()
	fs := make([]*follower, 0, len(t.ranks))
	for _, fl := range t.ranks {
		fs = append(fs, fl)
	}
	t.mu.Unlock()
	marks := make([]chan struct{}, len(fs))
	for i, fl := range fs {
		marks[i] = make(chan struct{})
		select {
		case fl.in <- input{mark: marks[i]}:
		case <-fl.done:
			close(marks[i])
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, fl := range fs {
		select {
		case <-marks[i]:
		case <-fl.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.applyMu.Lock()
	defer t.applyMu.Unlock()
	t.mu.Lock()
	pos := make(map[kvevent.WorkerRank]Position, len(t.ranks))
	for w, fl := range t.ranks {
		if last, ok := fl.s.Last(); ok {
			pos[w] = Position{Last: last, Publisher: fl.s.Publisher()}
		}
	}
	t.mu.Unlock()
	f(pos)
	return nil
}

// Follow folds a directory notification in for workers whose events come
// on plane: Added (or Updated) starts following every rank of the worker
// (a dump each); Removed drops its blocks, as does an Updated record whose
// events left the plane. Other workers are ignored.
func (t *Tracker) Follow(n fleet.Notification, plane fleet.EventKind) {
	rec := n.Worker.Record
	switch n.Kind {
	case fleet.Removed:
		t.Remove(rec.ID)
	case fleet.Added, fleet.Updated:
		if rec.Events.Kind != plane {
			if n.Kind == fleet.Updated {
				t.Remove(rec.ID) // no longer on this plane
			}
			return
		}
		size := max(rec.DPSize, 1)
		for r := rec.DPStart; r < rec.DPStart+size; r++ {
			t.Add(kvevent.WorkerRank{ID: rec.ID, Rank: kvevent.DPRank(r)})
		}
	}
}

// Workers returns the followed worker ranks.
func (t *Tracker) Workers() []kvevent.WorkerRank {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]kvevent.WorkerRank, 0, len(t.ranks))
	for w := range t.ranks {
		out = append(out, w)
	}
	return out
}

// Close stops every follower and waits for them.
func (t *Tracker) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
}

func (t *Tracker) run(ctx context.Context, f *follower) {
	s := f.s
	results := make(chan result, 1)
	var retry *time.Timer
	var retryC <-chan time.Time
	wait := t.cfg.RetryWait
	reported, lastExact, lastReason := false, false, ""
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	// exec advances the stream with next and applies the step (both under
	// applyMu, see Frozen), then logs, queries and reports.
	exec := func(next func() Step) {
		t.applyMu.RLock()
		st := next()
		if st.Clear {
			t.apply(kvevent.Event{Worker: s.Worker(), Kind: kvevent.Cleared})
		}
		for _, ev := range st.Apply {
			ev.Worker = s.Worker()
			t.apply(ev)
		}
		t.applyMu.RUnlock()
		t.m.step(st)
		if st.Gap {
			t.log.Info("event plane: gap in event ids, recovering", "worker", s.Worker().String(), "query", st.Query.String())
		}
		if st.Restart {
			t.log.Info("event plane: publisher restarted, asking for a dump", "worker", s.Worker().String())
		}
		if st.HasQuery {
			req := st.Query
			go func() {
				qctx, cancel := context.WithTimeout(ctx, t.cfg.QueryTimeout)
				rep, err := t.q.Query(qctx, req)
				cancel()
				results <- result{rep, err}
			}()
		}
		if s.Failing() && !s.Pending() && retryC == nil {
			if retry == nil {
				retry = time.NewTimer(wait)
			} else {
				retry.Reset(wait)
			}
			retryC = retry.C
			wait = min(2*wait, t.cfg.MaxRetryWait)
		}
		if exact, reason := s.Exact(); !reported || exact != lastExact || reason != lastReason {
			reported, lastExact, lastReason = true, exact, reason
			t.report(s.Worker(), exact, reason)
		}
	}
	exec(s.Start)
	for {
		select {
		case <-ctx.Done():
			if s.Pending() {
				<-results // the query goroutine ends with ctx
			}
			return
		case in := <-f.in:
			switch {
			case in.mark != nil:
				close(in.mark)
			case in.resync:
				exec(s.Resync)
			default:
				exec(func() Step { return s.Live(in.ev, in.pub) })
			}
		case r := <-results:
			if r.err != nil {
				if ctx.Err() != nil {
					return
				}
				t.m.recovery("failed", 0)
				t.log.Warn("event plane: recovery query failed", "worker", s.Worker().String(), "err", r.err)
				exec(func() Step { return s.Failed(r.err) })
				continue
			}
			dumped := 0
			if r.rep.Kind == KindTreeDump {
				dumped = len(r.rep.Events)
				t.log.Info("event plane: applying tree dump", "worker", s.Worker().String(), "blocks", dumped, "last_event_id", r.rep.LastEventID)
			}
			t.m.recovery(r.rep.Kind.String(), dumped)
			exec(func() Step { return s.Reply(r.rep) })
			if !s.Failing() {
				wait = t.cfg.RetryWait
			}
		case <-retryC:
			retryC = nil
			exec(s.Retry)
		}
	}
}

// Reasons an event is dropped before reaching a rank's stream, the reason
// label of kvrouter_eventplane_events_dropped_total.
const (
	// DropUnknownWorker: the worker rank was never added, or was removed
	// (AcceptUnknown off, the default).
	DropUnknownWorker = "unknown_worker"
	// DropRemovedWorker: AcceptUnknown, and the worker was removed.
	DropRemovedWorker = "removed_worker"
	// DropUnknownLimit: AcceptUnknown, and MaxUnknown ranks are followed
	// already.
	DropUnknownLimit = "unknown_limit"
)

// dropLogEvery is the least time between two log lines about dropped
// events: a flood of made-up worker ids must not flood the log too.
const dropLogEvery = 10 * time.Second

// dropLog rate-limits the dropped-events log line; Live runs on many
// goroutines, so it has its own lock.
type dropLog struct {
	mu    sync.Mutex
	last  time.Time
	count int
}

// note counts one drop at now and reports whether to log, with the drops
// since the last line (this one included).
func (d *dropLog) note(now time.Time) (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count++
	if !d.last.IsZero() && now.Sub(d.last) < dropLogEvery {
		return 0, false
	}
	n := d.count
	d.last, d.count = now, 0
	return n, true
}

func (t *Tracker) apply(ev kvevent.Event) {
	if err := t.a.ApplyEvent(ev); err != nil && !errors.Is(err, context.Canceled) {
		t.log.Debug("event plane: index refused event", "worker", ev.Worker.String(), "event_id", ev.ID, "err", err)
	}
}

// report folds one rank's state into its worker's and tells onState when
// the worker's state changes.
func (t *Tracker) report(w kvevent.WorkerRank, exact bool, reason string) {
	t.stateMu.Lock()
	defer t.stateMu.Unlock()
	rs := t.states[w.ID]
	if rs == nil {
		rs = map[kvevent.DPRank]string{}
		t.states[w.ID] = rs
	}
	if exact {
		reason = ""
	} else if reason == "" {
		reason = "recovering"
	}
	prevReason, had := rs[w.Rank]
	rs[w.Rank] = reason
	state, why := fleet.StateExact, ""
	for r, rr := range rs {
		if rr != "" {
			state, why = fleet.StateDegraded, fmt.Sprintf("rank %d: %s", r, rr)
			break
		}
	}
	prev, ok := t.agg[w.ID]
	if ok && prev == state && had && prevReason == reason {
		return
	}
	t.agg[w.ID] = state
	if ok && prev == state && state == fleet.StateExact {
		return
	}
	if t.onSt != nil {
		t.onSt(w.ID, state, why)
	}
}
