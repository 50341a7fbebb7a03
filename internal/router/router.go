package router

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvhash"
	"github.com/kvrouter/kvrouter/internal/scheduler"
	"github.com/kvrouter/kvrouter/internal/sequences"
	"github.com/kvrouter/kvrouter/internal/timemodel"
)

type workerState struct {
	info WorkerInfo
	down bool
}

// rank is one candidate slot, aligned with the ledger's rank order.
type rank struct {
	w  kvevent.WorkerRank
	ws *workerState
}

type scratch struct {
	local, seq []uint64
	scores     index.Scores
}

// Router is the router core. Its methods are safe for concurrent use.
type Router struct {
	cfg      Config
	idx      Index
	clock    func() time.Time
	observer Observer
	shadows  atomic.Pointer[shadowsRef]
	pool     sync.Pool

	mu      sync.Mutex
	seq     *sequences.Ledger
	sched   *scheduler.Scheduler
	rng     *rand.Rand
	pcg     *rand.PCG // rng's source; plans draw from a copy (plan.go)
	plan    planRand
	workers map[kvevent.WorkerID]*workerState
	ranks   []rank
	pos     map[kvevent.WorkerRank]int
	first   idTable // worker -> index in ranks of its first rank (ranks are sorted by id, rank)
	sharers []sequences.Sharer
	// cands is aligned with ranks and keeps each rank's worker facts
	// (Worker, Down, capacity, max batched tokens: set by rebuild and
	// SetDown); Route writes only the load columns and the overlaps of
	// the ranks the index scored, recorded in scored so that the next
	// Route clears them.
	cands  []scheduler.Candidate
	scored []int32
	stats  Stats
	models map[kvevent.WorkerRank]*timemodel.Model
	disagg bool   // some worker has a prefill or decode role (pd.go)
	roles  [3]int // workers by role (pd.go)
}

// New returns a router over idx. clock supplies the time for bookings,
// expiry and approximate-mode TTLs (time.Now in production, a fake in
// tests); observer, if not nil, receives local lifecycle events.
func New(cfg Config, idx Index, clock func() time.Time, observer Observer) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if idx == nil || clock == nil {
		return nil, fmt.Errorf("%w: index and clock are required", ErrConfig)
	}
	r := &Router{models: make(map[kvevent.WorkerRank]*timemodel.Model)}
	pol, err := r.policy(cfg)
	if err != nil {
		return nil, err
	}
	sched, err := scheduler.New(cfg.Scheduler, pol)
	if err != nil {
		return nil, err
	}
	sc := cfg.Sequences
	sc.BlockSize = cfg.BlockSize
	sc.TrackPrefillTokens = sc.TrackPrefillTokens && cfg.Scheduler.TrackPrefillTokens
	seq, err := sequences.New(sc)
	if err != nil {
		return nil, err
	}
	r.cfg, r.idx, r.clock, r.observer, r.seq, r.sched = cfg, idx, clock, observer, seq, sched
	r.pcg = rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)
	r.rng = rand.New(r.pcg)
	r.workers = make(map[kvevent.WorkerID]*workerState)
	r.pos = make(map[kvevent.WorkerRank]int)
	r.pool.New = func() any { return new(scratch) }
	return r, nil
}

// Config returns the router's configuration.
func (r *Router) Config() Config { return r.cfg }

// AddWorker adds a worker with all its dp ranks, or updates a known one
// (ranks no longer listed are removed with their requests). Errors:
// ErrBlockSizeMismatch, ErrWorkerInfo.
func (r *Router) AddWorker(info WorkerInfo) error {
	switch {
	case info.BlockSize != r.cfg.BlockSize:
		return fmt.Errorf("adding worker %d: block size %d, router %d: %w", info.ID, info.BlockSize, r.cfg.BlockSize, ErrBlockSizeMismatch)
	case info.DPStart < 0 || info.DPSize < 0 || info.DPSize > 1<<16 || info.KVCapacityBlocks < 0 || info.MaxBatchedTokens < 0:
		return fmt.Errorf("adding worker %d: %w: dp %d+%d, capacity %d, max batched %d", info.ID, ErrWorkerInfo, info.DPStart, info.DPSize, info.KVCapacityBlocks, info.MaxBatchedTokens)
	}
	if info.DPSize == 0 {
		info.DPSize = 1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, ok := r.workers[info.ID]
	if !ok {
		ws = &workerState{}
		r.workers[info.ID] = ws
	} else {
		for _, w := range r.seq.Workers() {
			if w.ID == info.ID && (int(w.Rank) < info.DPStart || int(w.Rank) >= info.DPStart+info.DPSize) {
				r.seq.RemoveRank(w)
			}
		}
	}
	ws.info = info
	for k := range info.DPSize {
		r.seq.AddRank(kvevent.WorkerRank{ID: info.ID, Rank: kvevent.DPRank(info.DPStart + k)})
	}
	r.rebuild()
	// A concurrent index queues the reservation behind the worker's
	// earlier operations (as Route's Record and Predict do).
	if n := min(info.KVCapacityBlocks, r.cfg.IndexReserveMaxBlocks); n > 0 {
		for k := range info.DPSize {
			w := kvevent.WorkerRank{ID: info.ID, Rank: kvevent.DPRank(info.DPStart + k)}
			if err := r.idx.Reserve(w, n); err != nil {
				// Only speed is lost: the table grows as blocks arrive.
				r.indexErr(err)
			}
		}
	}
	return nil
}

// RemoveWorker forgets a worker: its running requests are freed (without
// lifecycle events: every replica removes the worker itself) and its
// blocks leave the index.
func (r *Router) RemoveWorker(id kvevent.WorkerID) error {
	r.mu.Lock()
	if _, ok := r.workers[id]; ok {
		for _, w := range r.seq.Workers() {
			if w.ID == id {
				r.seq.RemoveRank(w)
			}
		}
		delete(r.workers, id)
		r.rebuild()
	}
	r.mu.Unlock()
	return r.idx.RemoveWorker(id)
}

// SetDown marks a worker DOWN (excluded from routing) or back up. It
// returns false for an unknown worker.
func (r *Router) SetDown(id kvevent.WorkerID, down bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws, ok := r.workers[id]
	if ok {
		ws.down = down
		if i, found := r.first.get(id); found {
			for ; i < len(r.ranks) && r.ranks[i].w.ID == id; i++ {
				r.cands[i].Down = down
			}
		}
	}
	return ok
}

// rebuild realigns the rank table with the ledger's rank order.
func (r *Router) rebuild() {
	r.noteRoles()
	ws := r.seq.Workers()
	r.ranks = r.ranks[:0]
	r.cands = r.cands[:0]
	r.scored = r.scored[:0]
	clear(r.pos)
	r.first.reset(len(ws))
	for i, w := range ws {
		st := r.workers[w.ID]
		r.ranks = append(r.ranks, rank{w: w, ws: st})
		r.cands = append(r.cands, scheduler.Candidate{Worker: w, Down: st.down,
			KVCapacityBlocks: st.info.KVCapacityBlocks, MaxBatchedTokens: st.info.MaxBatchedTokens})
		r.pos[w] = i
		if i == 0 || ws[i-1].ID != w.ID {
			r.first.put(w.ID, i)
		}
	}
	r.pruneModels()
}

// rankPos returns worker rank w's index in ranks. It is pos[w] through a
// map keyed by the 8-byte worker id (a struct key is hashed the slow way;
// Route looks up one rank per scored worker): a worker's ranks are
// contiguous, usually numbered without gaps.
func (r *Router) rankPos(w kvevent.WorkerRank) (int, bool) {
	i, ok := r.first.get(w.ID)
	if !ok {
		return 0, false
	}
	if j := i + int(w.Rank) - int(r.ranks[i].w.Rank); j >= i && j < len(r.ranks) && r.ranks[j].w == w {
		return j, true
	}
	p, ok := r.pos[w]
	return p, ok
}

// ApplyEvent folds a KV event into the index. It is the one way KV events
// reach the index: every transport's events are handed to it (in a
// router process, by the service's applier, which also notes the worker
// alive); nothing else writes them.
func (r *Router) ApplyEvent(ev kvevent.Event) error {
	return r.idx.Apply(ev)
}

// Route chooses a worker rank for the request and books it there; the
// caller must later call Free (and MarkPrefillCompleted at the first
// token). With replica sync attached (SetShadows), the shadows whose time
// has passed end first and the booking's shadows are booked after it.
// Errors wrap ErrNoCandidates, ErrAllBusy, ErrPinnedBusy (a
// *PinnedBusyError), ErrDuplicateRequest, ErrRequest
// or a hashing error.
func (r *Router) Route(req Request) (Decision, error) {
	sh := r.shadows.Load()
	if sh == nil {
		return r.route(req, true)
	}
	now := r.clock()
	sh.s.Tick(now)
	d, err := r.route(req, true)
	if err == nil && d.Booked {
		sh.s.BookShadows(req.ID, now)
	}
	return d, err
}

// Plan is Route without booking: the decision a Route would take now,
// for /v1/query-style inspection, the admission queue's predicted prefill
// and PD plans. It leaves no trace: the random draws it makes come from a
// copy of the router's source, a stateful policy (round-robin) peeks, and a
// failed plan is not counted in Stats.Rejected.
func (r *Router) Plan(req Request) (Decision, error) { return r.route(req, false) }

// LocalHashes returns the local block hashes of req's prompt as Route
// computes them (the router's block size; req's LoRA name, namespace and
// multimodal hashes), for callers that query the index themselves.
func (r *Router) LocalHashes(req Request) ([]uint64, error) {
	local, err := kvhash.LocalHashes(req.Tokens, r.hashOptions(req), nil)
	if err != nil {
		return nil, fmt.Errorf("hashing: %w", err)
	}
	return local, nil
}

func (r *Router) hashOptions(req Request) kvhash.Options {
	return kvhash.Options{BlockSize: r.cfg.BlockSize, LoRAName: req.LoRAName, Namespace: req.Namespace, MM: req.MM}
}

func (r *Router) route(req Request, book bool) (Decision, error) {
	if book && req.ID == "" {
		r.reject()
		return Decision{}, fmt.Errorf("routing: %w: empty request id", ErrRequest)
	}
	sc := r.pool.Get().(*scratch)
	defer r.pool.Put(sc)
	var err error
	sc.local, sc.seq, err = kvhash.Hashes(req.Tokens, r.hashOptions(req), sc.local, sc.seq)
	if err != nil {
		if book {
			r.reject()
		}
		return Decision{}, fmt.Errorf("routing %q: hashing: %w", req.ID, err)
	}
	r.idx.Query(sc.local, &sc.scores)

	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.phaseRequest(&req) {
		r.rejectIf(book)
		return Decision{RequestID: req.ID, InputTokens: len(req.Tokens), Blocks: len(sc.seq)},
			fmt.Errorf("routing %q: no %s-capable worker: %w", req.ID, req.Phase, ErrNoCandidates)
	}
	now := r.clock()
	// The ledger's own loads, read once (not copied first); every rank
	// but the sharers would add newBlocks.
	loads, newBlocks, sharers := r.seq.PotentialView(sc.seq, req.Reuse, r.sharers)
	r.sharers = sharers
	if len(loads) != len(r.cands) {
		r.rebuild() // not expected: the ledger's ranks are the router's, realigned on every change
	}
	cands := r.cands
	for _, p := range r.scored {
		cands[p].Overlap = scheduler.Overlap{}
	}
	r.scored = r.scored[:0]
	// The worker facts are in place (rebuild); the load columns are
	// written field by field (a Candidate built in registers and copied
	// in stalls store forwarding once per worker).
	loads = loads[:len(cands)]
	nb := float64(newBlocks)
	for i := range loads {
		l, c := &loads[i], &cands[i]
		c.ActivePrefillTokens = l.ActivePrefillTokens
		c.PrefillElapsed = 0
		c.ITLExposure = l.ITLExposure
		if l.ActivePrefillTokens > 0 {
			if since := r.seq.PrefillSinceAt(i); !since.IsZero() {
				c.PrefillElapsed = max(now.Sub(since), 0)
			}
		}
		c.ActiveBlocks = l.ActiveBlocks
		c.DecodeBlocks = l.ActiveBlocks + nb // Load.PotentialDecodeBlocks
		c.ActiveRequests = l.ActiveRequests
	}
	for _, sh := range sharers {
		cands[sh.Pos].DecodeBlocks = loads[sh.Pos].ActiveBlocks + float64(sh.NewBlocks)
	}
	for i := range sc.scores.List {
		s := &sc.scores.List[i]
		if p, ok := r.rankPos(s.Worker); ok {
			cands[p].Overlap = scheduler.Overlap{
				Device: int(s.Tiers[kvevent.TierDevice]),
				Host:   int(s.Tiers[kvevent.TierHostPinned]),
				Disk:   int(s.Tiers[kvevent.TierDisk] + s.Tiers[kvevent.TierExternal]),
			}
			r.scored = append(r.scored, int32(p))
		}
	}
	sd, err := r.selectInto(book, req.Explanation, scheduler.Request{
		InputTokens:    len(req.Tokens),
		BlockSize:      r.cfg.BlockSize,
		Overrides:      req.Overrides,
		AllowedWorkers: req.AllowedWorkers,
		PinnedWorker:   req.PinnedWorker,
		HasPinned:      req.HasPinned,
		DPRankStart:    req.DPRankStart,
		DPRankSize:     req.DPRankSize,
		Now:            now,
		Hop:            req.Phase.hop(),
	}, cands)
	d := Decision{Decision: sd, RequestID: req.ID, InputTokens: len(req.Tokens), Blocks: len(sc.seq)}
	if err != nil {
		r.rejectIf(book)
		return d, fmt.Errorf("routing %q: %w", req.ID, pinnedBusy(&req, &sd, err))
	}
	d.OverlapBlocks = sd.ChosenRow().Overlap.Device
	d.PrefillTokens = max(len(req.Tokens)-d.OverlapBlocks*r.cfg.BlockSize, 0)
	d.Phase = req.Phase
	if !book {
		return d, nil
	}
	if req.Phase == PhaseDecode {
		d.PrefillTokens = 0 // the prompt's KV arrives by transfer
	}
	booked := d.PrefillTokens
	if err := r.seq.AddRequest(sequences.Request{
		ID:                   req.ID,
		Worker:               d.Worker,
		BlockHashes:          sc.seq,
		PrefillTokens:        booked,
		ExpectedOutputTokens: req.ExpectedOutputTokens,
		Reuse:                req.Reuse,
	}, now); err != nil {
		r.stats.Rejected++
		return d, fmt.Errorf("routing %q: booking: %w", req.ID, err)
	}
	d.Booked = true
	r.stats.Routed++
	switch {
	case r.ranks[d.Chosen].ws.info.Mode == Approximate || req.RecordDecision:
		r.indexErr(r.idx.Record(d.Worker, slices.Clone(sc.local), now))
	case r.cfg.PredictOnRoute:
		r.indexErr(r.idx.Predict(d.Worker, slices.Clone(sc.local), now))
	}
	if r.observer != nil {
		r.observer(LifecycleEvent{
			Kind:                 AddRequest,
			RouterID:             r.cfg.RouterID,
			RequestID:            req.ID,
			Worker:               d.Worker,
			BlockHashes:          slices.Clone(sc.seq),
			PrefillTokens:        booked,
			ExpectedOutputTokens: req.ExpectedOutputTokens,
			Private:              !r.reuse(req.Reuse),
		})
	}
	return d, nil
}

func (r *Router) reuse(o sequences.Reuse) bool {
	switch o {
	case sequences.ReuseOn:
		return true
	case sequences.ReuseOff:
		return false
	}
	return r.cfg.Sequences.AssumeKVReuse
}

func (r *Router) reject() {
	r.mu.Lock()
	r.stats.Rejected++
	r.mu.Unlock()
}

func (r *Router) indexErr(err error) {
	if err != nil {
		r.stats.IndexErrors++
	}
}

// MarkPrefillCompleted records the request's first output token: its
// prefill leaves the load. It returns false (and counts) for an unknown id.
func (r *Router) MarkPrefillCompleted(id string) bool {
	return r.lifecycle(MarkPrefillCompleted, id)
}

// Free ends the request (completion, error or cancel); idempotent. It
// returns false (and counts) for an unknown id.
func (r *Router) Free(id string) bool { return r.lifecycle(Free, id) }

func (r *Router) lifecycle(k LifecycleKind, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, _ := r.seq.WorkerOf(id)
	now := r.clock()
	var ok bool
	if k == Free {
		ok = r.seq.FreeAt(id, now)
	} else {
		ok = r.seq.MarkPrefillCompletedAt(id, now)
	}
	if ok && r.observer != nil {
		r.observer(LifecycleEvent{Kind: k, RouterID: r.cfg.RouterID, RequestID: id, Worker: w})
	}
	return ok
}

// SetGenerated reports the request's generated-token count so far (used
// with output-block tracking; not shared with other routers).
func (r *Router) SetGenerated(id string, tokens int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq.SetGenerated(id, tokens)
}

// ApplyRemote applies another router's lifecycle event. Events carrying
// this router's id are ignored (returns false, not counted); events that
// cannot apply (unknown worker or request, duplicate id) are dropped and
// counted.
func (r *Router) ApplyRemote(ev LifecycleEvent) bool {
	if ev.RouterID == r.cfg.RouterID {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := false
	switch ev.Kind {
	case AddRequest:
		reuse := sequences.ReuseOn
		if ev.Private {
			reuse = sequences.ReuseOff
		}
		ok = r.seq.AddRequest(sequences.Request{
			ID:                   ev.RequestID,
			Worker:               ev.Worker,
			BlockHashes:          ev.BlockHashes,
			PrefillTokens:        ev.PrefillTokens,
			ExpectedOutputTokens: ev.ExpectedOutputTokens,
			Reuse:                reuse,
		}, r.clock()) == nil
	case MarkPrefillCompleted:
		ok = r.seq.MarkPrefillCompletedAt(ev.RequestID, r.clock())
	case Free:
		ok = r.seq.FreeAt(ev.RequestID, r.clock())
	}
	if ok {
		r.stats.RemoteApplied++
	} else {
		r.stats.RemoteDropped++
	}
	return ok
}

// Sweep runs the ledger's lazy expiry now (it also runs on every
// booking) and returns the ids it freed, then drops approximate and
// predicted index entries whose TTL has passed. Call it periodically from
// the edge (e.g. every few seconds); the core starts no timers.
func (r *Router) Sweep() []string {
	r.mu.Lock()
	now := r.clock()
	ids := r.seq.Expire(now)
	r.mu.Unlock()
	if err := r.idx.Expire(now); err != nil {
		r.mu.Lock()
		r.stats.IndexErrors++
		r.mu.Unlock()
	}
	return ids
}

// Loads returns every worker rank's current load, sorted by worker rank.
func (r *Router) Loads() []Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Load, 0, len(r.ranks))
	for _, rk := range r.ranks {
		l, _ := r.seq.Load(rk.w)
		out = append(out, l)
	}
	return out
}

// Workers returns the known workers' descriptions, sorted by id, with
// their DOWN flag.
func (r *Router) Workers() (infos []WorkerInfo, down []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]kvevent.WorkerID, 0, len(r.workers))
	for id := range r.workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		infos = append(infos, r.workers[id].info)
		down = append(down, r.workers[id].down)
	}
	return infos, down
}

// Stats returns the router's counters.
func (r *Router) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Sequences = r.seq.Stats()
	return s
}
