package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
	"github.com/kvrouter/kvrouter/internal/router"
)

// eventRouter is what the worker set needs from the router core.
type eventRouter interface {
	ApplyEvent(ev kvevent.Event) error
	SetDown(id kvevent.WorkerID, down bool) bool
}

var (
	_ eventRouter = (*router.Router)(nil)
	_ eventRouter = (*router.Pools)(nil)
)

// workerSet owns every worker's state. It turns what the event
// subscribers, the silence watchdog and the health prober observe into one
// fleet state per worker (EXACT, DEGRADED, APPROX, DOWN; REFUSED is the
// directory's own), and it is the front door's Directory. It keeps the
// facts; fleet.Facts.State derives the state from them (precedence
// documented there).
type workerSet struct {
	dir    *fleet.Directory
	router eventRouter
	clock  func() time.Time
	log    *slog.Logger
	silent time.Duration

	mu    sync.Mutex
	byID  map[kvevent.WorkerID]*workerState
	names []kvevent.WorkerID // sorted by name

	// live maps worker ids to their *workerState for the event path's
	// lock-free touched.
	live sync.Map
	// ingested counts the KV events each transport handed in (applier).
	ingested [numTransports]atomic.Uint64
	// adapters learns the LoRA adapters named by the workers' KV events;
	// nil learns nothing.
	adapters *adapterSet
}

// workerState is what the service tracks about one worker beyond its
// fleet record: the facts its state is derived from.
type workerState struct {
	id    kvevent.WorkerID
	name  string
	url   string
	dp    bool
	exact bool // fed by KV events (else approximate mode)
	// plane: fed by the event plane (a recovery tracker reports its
	// state through planeState) rather than per-rank subscribers.
	plane bool

	// lastEvent is the wall time of the last applied batch, in Unix ns;
	// atomic so the event path takes no lock.
	lastEvent atomic.Int64
	// silentFlag mirrors silent for the event path's lock-free check.
	silentFlag atomic.Bool

	// Guarded by workerSet.mu.
	ranks     []*rankState
	busySince time.Time
	silent    bool
	down      bool
	downWhy   string
	failures  int
	// slowProbes counts probes in a row that timed out while the
	// worker's events kept arriving (not counted as failures).
	slowProbes int
	// Event-plane state (plane workers): the tracker's last report, and
	// whether it has been EXACT once (initial recovery done).
	planeExact  bool
	planeWhy    string
	planeSynced bool
}

// rankState is one data-parallel rank's event stream.
type rankState struct {
	w      *workerState
	set    *workerSet
	worker kvevent.WorkerRank
	sub    *vllmzmq.Subscriber

	// Guarded by workerSet.mu.
	state  vllmzmq.State
	reason string
	synced bool // left SYNCING at least once: initial replay done or given up
	// blockWhy is set while the rank's events carry another block size
	// than the worker declared ("events carry block size 32 ≠ 16");
	// refusedSeq is the last batch with such a refusal.
	blockWhy   string
	refusedSeq uint64
	// blockBad mirrors blockWhy != "" for Apply's lock-free check.
	blockBad atomic.Bool
}

var (
	_ vllmzmq.Handler        = (*rankState)(nil)
	_ vllmzmq.RefusalHandler = (*rankState)(nil)
)

// Refused implements vllmzmq.RefusalHandler: events whose block size
// differs from the worker's declared one are dropped by the decoder, so
// the worker's index silently misses blocks. The rank is DEGRADED with the
// reason until a later batch stores blocks without such a refusal.
func (r *rankState) Refused(seq uint64, refusals []vllm.Refusal) {
	for _, x := range refusals {
		if x.Reason != vllm.ReasonBlockSize {
			continue
		}
		s := r.set
		why := "events carry " + x.Detail
		s.mu.Lock()
		defer s.mu.Unlock()
		r.refusedSeq = seq
		if r.blockWhy != why {
			r.blockWhy = why
			r.blockBad.Store(true)
			s.log.Warn("worker publishes KV events with another block size than it declared: they are refused",
				"worker", r.w.name, "dp_rank", r.worker.Rank, "detail", x.Detail)
			s.updateLocked(r.w)
		}
		return
	}
}

// blockSizeOK clears a block-size refusal once batch seq stored blocks
// without one.
func (r *rankState) blockSizeOK(seq uint64, events []kvevent.Event) {
	if !r.blockBad.Load() || !slices.ContainsFunc(events, func(e kvevent.Event) bool { return e.Kind == kvevent.Stored }) {
		return
	}
	s := r.set
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.blockWhy == "" || r.refusedSeq == seq {
		return
	}
	r.blockWhy = ""
	r.blockBad.Store(false)
	s.updateLocked(r.w)
}

func newWorkerSet(dir *fleet.Directory, r eventRouter, clock func() time.Time, log *slog.Logger, silent time.Duration) *workerSet {
	return &workerSet{dir: dir, router: r, clock: clock, log: log, silent: silent, byID: map[kvevent.WorkerID]*workerState{}}
}

// add registers an accepted worker whose events come from src. It
// returns the worker's state, with one rank state per dp rank for workers
// read from their engine's ZMQ stream. Adding a known id replaces it.
func (s *workerSet) add(rec fleet.WorkerRecord, src source) *workerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &workerState{id: rec.ID, name: rec.Name, url: rec.URL, dp: rec.DPSize > 1, exact: src != sourceNone,
		plane: src == sourcePlane, planeWhy: "awaiting initial event recovery"}
	if src == sourceEngine {
		for r := range rec.DPSize {
			w.ranks = append(w.ranks, &rankState{w: w, set: s,
				worker: kvevent.WorkerRank{ID: rec.ID, Rank: kvevent.DPRank(rec.DPStart + r)},
				state:  vllmzmq.StateSyncing, reason: "awaiting initial event recovery"})
		}
	}
	w.lastEvent.Store(s.clock().UnixNano())
	if _, ok := s.byID[rec.ID]; !ok {
		s.names = append(s.names, rec.ID)
	}
	s.byID[rec.ID] = w
	s.live.Store(rec.ID, w)
	sort.Slice(s.names, func(i, j int) bool { return s.byID[s.names[i]].name < s.byID[s.names[j]].name })
	s.updateLocked(w)
	return w
}

// Apply implements vllmzmq.Handler: the batch's events go, in order, to
// the engine transport's applier (the index through the router, the
// worker marked alive); the rank keeps only its block-size refusal.
func (r *rankState) Apply(seq uint64, events []kvevent.Event) {
	s := r.set
	if len(events) > 0 && s.log.Enabled(context.Background(), slog.LevelDebug) {
		s.log.Debug("KV event batch", "worker", r.w.name, "dp_rank", r.worker.Rank, "seq", seq, "events", len(events), "first", events[0].Kind, "blocks", len(events[0].Blocks))
	}
	a := s.applier(transportEngine)
	for _, ev := range events {
		if err := a.ApplyEvent(ev); err != nil {
			s.log.Debug("KV event not applied", "worker", r.w.name, "err", err)
		}
	}
	r.blockSizeOK(seq, events)
}

// alive notes an applied event of w: the silence watchdog's clock, and
// the end of a silence.
func (s *workerSet) alive(w *workerState) {
	w.lastEvent.Store(s.clock().UnixNano())
	if w.silentFlag.Load() {
		s.mu.Lock()
		w.silent = false
		w.silentFlag.Store(false)
		w.busySince = time.Time{}
		s.updateLocked(w)
		s.mu.Unlock()
	}
}

// touched notes an applied event of worker id (unknown ids, e.g.
// publishers discovery never announced, are ignored). Lock-free unless it
// ends a silence.
func (s *workerSet) touched(id kvevent.WorkerID) {
	if v, ok := s.live.Load(id); ok {
		s.alive(v.(*workerState))
	}
}

// planeState records the event plane's report on worker id: EXACT once
// every rank is recovered, DEGRADED with the reason otherwise.
func (s *workerSet) planeState(id kvevent.WorkerID, st fleet.State, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.byID[id]
	if w == nil || !w.plane {
		return
	}
	w.planeExact = st == fleet.StateExact
	w.planeWhy = why
	if w.planeExact && !w.planeSynced {
		w.planeSynced = true
		s.log.Info("worker event stream synced", "worker", w.name, "event_plane", true)
	}
	switch {
	case st != fleet.StateDegraded:
	case w.planeSynced:
		s.log.Warn("worker event stream degraded", "worker", w.name, "reason", why)
	default: // the initial recovery: expected, not a warning
		s.log.Debug("worker event stream recovering", "worker", w.name, "reason", why)
	}
	s.updateLocked(w)
}

// remove forgets worker id (deregistered or expired).
func (s *workerSet) remove(id kvevent.WorkerID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		return
	}
	delete(s.byID, id)
	s.live.Delete(id)
	for i, n := range s.names {
		if n == id {
			s.names = append(s.names[:i:i], s.names[i+1:]...)
			break
		}
	}
}

// updated takes a registered worker's new record (its URL may move).
func (s *workerSet) updated(rec fleet.WorkerRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.byID[rec.ID]; w != nil {
		w.url = rec.URL
		w.dp = rec.DPSize > 1
	}
}

// StateChanged implements vllmzmq.Handler.
func (r *rankState) StateChanged(c vllmzmq.StateChange) {
	s := r.set
	s.mu.Lock()
	defer s.mu.Unlock()
	r.state, r.reason = c.State, c.Reason
	if c.State != vllmzmq.StateSyncing && !r.synced {
		r.synced = true
		s.log.Info("worker event stream synced", "worker", r.w.name, "dp_rank", r.worker.Rank, "detail", c.Reason)
	}
	if c.State == vllmzmq.StateDegraded {
		s.log.Warn("worker event stream degraded", "worker", r.w.name, "dp_rank", r.worker.Rank, "reason", c.Reason)
	}
	s.updateLocked(r.w)
}

// factsLocked gathers what is known of w for the fleet model to derive
// its state from.
func (s *workerSet) factsLocked(w *workerState) fleet.Facts {
	f := fleet.Facts{Down: w.down, DownReason: w.downWhy, Events: w.exact,
		Plane: w.plane, PlaneExact: w.planeExact, PlaneReason: w.planeWhy,
		Silent: w.silent, SilenceWindow: s.silent}
	if len(w.ranks) > 0 {
		f.Ranks = make([]fleet.RankFacts, len(w.ranks))
		for i, r := range w.ranks {
			f.Ranks[i] = fleet.RankFacts{Rank: r.worker.Rank, Stream: streamState(r.state), Reason: r.reason, BlockSize: r.blockWhy}
		}
	}
	return f
}

// streamState maps a subscriber's state onto the fleet model's.
func streamState(st vllmzmq.State) fleet.StreamState {
	switch st {
	case vllmzmq.StateExact:
		return fleet.StreamExact
	case vllmzmq.StateDegraded:
		return fleet.StreamDegraded
	}
	return fleet.StreamSyncing
}

// updateLocked pushes a worker's derived status to the directory, logging
// transitions.
func (s *workerSet) updateLocked(w *workerState) {
	st, why := s.factsLocked(w).State()
	old, _ := s.dir.Get(w.id)
	if old.Status.State == fleet.StateRefused {
		return
	}
	if old.Status.State == st && old.Status.Reason == why && !old.Status.Since.IsZero() {
		return
	}
	s.dir.SetStatus(w.id, st, why, s.clock())
	if old.Status.State != st {
		lvl := slog.LevelInfo
		if st == fleet.StateDown || st == fleet.StateDegraded {
			lvl = slog.LevelWarn
		}
		s.log.Log(context.Background(), lvl, "worker state", "worker", w.name, "from", old.Status.State.String(), "to", st.String(), "reason", why)
	}
}

// checkSilence marks event-fed workers DEGRADED when requests run on them
// and no event arrived for the silence window; active maps worker ids to
// their running requests.
func (s *workerSet) checkSilence(active map[kvevent.WorkerID]int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.names {
		w := s.byID[id]
		if !w.exact || w.down {
			continue
		}
		if active[id] == 0 {
			w.busySince = time.Time{}
			continue
		}
		if w.busySince.IsZero() {
			w.busySince = now
		}
		if !w.silent && fleet.Silent(time.Unix(0, w.lastEvent.Load()), w.busySince, now, s.silent) {
			w.silent = true
			w.silentFlag.Store(true)
			s.updateLocked(w)
		}
	}
}

// probed records a health probe's outcome; failures in a row past limit
// mark the worker DOWN, one success brings it back. started is when the
// probe was sent: a probe that timed out while the worker's KV events
// kept arriving (one applied at or after started) is inconclusive, not a
// failure. An engine starved of CPU answers /health late while it still
// computes and publishes; counting those timeouts took healthy workers out
// of the fleet exactly when it was busiest. A refused connection or a
// bad status always counts, and an inconclusive probe does not bring a
// DOWN worker back either.
func (s *workerSet) probed(id kvevent.WorkerID, err error, limit int, started time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.byID[id]
	if w == nil {
		return
	}
	if err == nil {
		w.failures, w.slowProbes = 0, 0
		if w.down {
			w.down, w.downWhy = false, ""
			s.router.SetDown(id, false)
			s.updateLocked(w)
		}
		return
	}
	if timedOut(err) && w.lastEvent.Load() >= started.UnixNano() {
		if w.slowProbes++; w.slowProbes == 1 {
			s.log.Warn("health probe timed out while the worker's KV events kept arriving; not counted as a failure",
				"worker", w.name, "err", err)
		}
		return
	}
	w.slowProbes = 0
	w.failures++
	if w.failures >= limit && !w.down {
		w.down, w.downWhy = true, fmt.Sprintf("health check failed %d times: %v", w.failures, err)
		s.router.SetDown(id, true)
		s.updateLocked(w)
	}
}

// timedOut reports whether a probe failed by running out of time (the
// client's timeout or a deadline), as opposed to being refused or
// answered badly.
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &t) && t.Timeout())
}

// synced reports whether every event-fed rank has finished (or given up)
// its initial replay, and names those that have not.
func (s *workerSet) synced() (bool, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pending []string
	for _, id := range s.names {
		w := s.byID[id]
		if w.plane && !w.planeSynced {
			pending = append(pending, w.name)
		}
		for _, r := range w.ranks {
			if !r.synced {
				pending = append(pending, r.worker.String()+" ("+w.name+")")
			}
		}
	}
	return len(pending) == 0, pending
}

// urls returns every known worker's id and URL, for the health prober.
func (s *workerSet) urls() map[kvevent.WorkerID]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[kvevent.WorkerID]string, len(s.byID))
	for id, w := range s.byID {
		m[id] = w.url
	}
	return m
}

// Lookup implements frontend.Directory.
func (s *workerSet) Lookup(id kvevent.WorkerID) (frontend.WorkerEntry, bool) {
	w, ok := s.dir.Get(id)
	if !ok {
		return frontend.WorkerEntry{}, false
	}
	return s.entry(w), true
}

// List implements frontend.Directory: every worker, refused ones included,
// by name.
func (s *workerSet) List() []frontend.WorkerEntry {
	ws := s.dir.Workers()
	out := make([]frontend.WorkerEntry, 0, len(ws))
	for _, w := range ws {
		out = append(out, s.entry(w))
	}
	return out
}

func (s *workerSet) entry(w fleet.Worker) frontend.WorkerEntry {
	e := frontend.WorkerEntry{ID: w.Record.ID, Name: w.Record.Name, URL: w.Record.URL, Status: w.Status,
		SendDPRank: w.Record.DPSize > 1, BootstrapPort: w.Record.BootstrapPort}
	s.mu.Lock()
	ws := s.byID[w.Record.ID]
	var sub *vllmzmq.Subscriber
	if ws != nil && len(ws.ranks) > 0 {
		sub = ws.ranks[0].sub
	}
	s.mu.Unlock()
	if sub != nil {
		st := sub.Status()
		e.LastSequence, e.HasSequence = st.LastSeq, st.HasSeq
	}
	return e
}

var _ frontend.Directory = (*workerSet)(nil)
