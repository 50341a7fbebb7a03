package router

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/scheduler"
)

// ErrUnknownModel refuses a request for a model no pool serves (no
// worker ever declared it). Such errors wrap ErrNoCandidates too: no
// worker can take the request.
var ErrUnknownModel = errors.New("unknown model")

// Pools routes a fleet that serves several models: one Router per model
// (a pool, with its own block size, scheduler settings and active
// sequences), over one shared Index. A request goes to the pool its
// Request.Model names ("" is the default model) and is only ever placed on
// that pool's workers; a pool scores only its own workers' blocks, so the
// blocks of different models never match even when their token ids do.
// A worker belongs to one pool at a time: adding it under another model
// (a worker that restarted serving another model) removes it from its old
// pool first, blocks and running requests included.
//
// A pool is made by AddModel, or on the first worker that declares an
// unknown model (its block size is then that worker's); a pool made that
// way goes with its last worker, and at most MaxPools exist, so workers
// cycling through model names cannot grow the router. Its methods are
// safe for concurrent use; like Router it does no I/O and reads no clock.
type Pools struct {
	idx      Index
	clock    func() time.Time
	observer Observer
	base     Config
	def      string

	mu     sync.RWMutex
	pools  map[string]*Router
	kept   map[string]bool // pools made by NewPools or AddModel: never dropped
	count  map[string]int  // workers per pool
	names  []string        // sorted
	worker map[kvevent.WorkerID]string
	// reqs maps a booked request to its pool, for Free and friends; only
	// kept while more than one pool exists (one pool needs no lookup).
	reqMu sync.Mutex
	reqs  map[string]*Router

	shadows       Shadows       // replica sync's, for every pool (mu)
	unknownRemote atomic.Uint64 // peers' events for a model with no pool
}

// NewPools returns pools with one pool, for the default model def, built
// from cfg; pools made later start from cfg too (with their own block
// size). idx, clock and observer are as for New.
func NewPools(def string, cfg Config, idx Index, clock func() time.Time, observer Observer) (*Pools, error) {
	p := &Pools{idx: idx, clock: clock, observer: observer, base: cfg, def: def,
		pools: map[string]*Router{}, kept: map[string]bool{}, count: map[string]int{},
		worker: map[kvevent.WorkerID]string{}, reqs: map[string]*Router{}}
	if err := p.AddModel(def, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Default returns the default model's name.
func (p *Pools) Default() string { return p.def }

// AddModel makes the pool of model name with cfg, or does nothing when it
// exists (its configuration stays).
func (p *Pools) AddModel(name string, cfg Config) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.addLocked(name, cfg)
	if err == nil {
		p.kept[name] = true
	}
	return err
}

// MaxPools bounds the pools Pools keeps.
const MaxPools = 1024

// ErrTooManyModels refuses a worker whose model would make more than
// MaxPools pools.
var ErrTooManyModels = errors.New("too many models")

func (p *Pools) addLocked(name string, cfg Config) (*Router, error) {
	if r, ok := p.pools[name]; ok {
		return r, nil
	}
	if len(p.pools) >= MaxPools {
		return nil, fmt.Errorf("model %q: %d pools already: %w", name, len(p.pools), ErrTooManyModels)
	}
	r, err := New(cfg, p.idx, p.clock, p.observerFor(name))
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", name, err)
	}
	if s := p.shadows; s != nil {
		r.SetShadows(s)
	}
	p.pools[name] = r
	p.names = append(p.names, name)
	sort.Strings(p.names)
	return r, nil
}

// name maps "" to the default model.
func (p *Pools) name(model string) string {
	if model == "" {
		return p.def
	}
	return model
}

// Pool returns model's pool ("" is the default model's).
func (p *Pools) Pool(model string) (*Router, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	r, ok := p.pools[p.name(model)]
	return r, ok
}

// Models returns the models that have a pool, sorted.
func (p *Pools) Models() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return slices.Clone(p.names)
}

// ModelOf returns the model worker id is in.
func (p *Pools) ModelOf(id kvevent.WorkerID) (string, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	m, ok := p.worker[id]
	return m, ok
}

// AddWorker adds worker info to model's pool ("" is the default model's),
// making the pool with the worker's block size when the model is new, or
// updates it. A worker known under another model leaves that pool first.
// Errors: those of Router.AddWorker (ErrBlockSizeMismatch when the
// pool's block size differs).
func (p *Pools) AddWorker(model string, info WorkerInfo) error {
	model = p.name(model)
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.pools[model]
	if !ok {
		cfg := p.base
		cfg.BlockSize = info.BlockSize
		var err error
		if r, err = p.addLocked(model, cfg); err != nil {
			return fmt.Errorf("adding worker %d: %w", info.ID, err)
		}
	}
	if old, ok := p.worker[info.ID]; ok && old != model {
		if err := p.leaveLocked(info.ID, old); err != nil {
			return fmt.Errorf("moving worker %d from model %q: %w", info.ID, old, err)
		}
	}
	if err := r.AddWorker(info); err != nil {
		p.dropIfEmptyLocked(model)
		return err
	}
	if _, ok := p.worker[info.ID]; !ok {
		p.count[model]++
	}
	p.worker[info.ID] = model
	return nil
}

// leaveLocked removes worker id from pool m, dropping the pool when it
// was made for workers and this was its last.
func (p *Pools) leaveLocked(id kvevent.WorkerID, m string) error {
	delete(p.worker, id)
	p.count[m]--
	err := p.pools[m].RemoveWorker(id)
	p.dropIfEmptyLocked(m)
	return err
}

// dropIfEmptyLocked forgets pool m when it has no worker and was not
// configured.
func (p *Pools) dropIfEmptyLocked(m string) {
	if p.kept[m] || p.count[m] > 0 {
		return
	}
	delete(p.pools, m)
	delete(p.count, m)
	if i, ok := slices.BinarySearch(p.names, m); ok {
		p.names = slices.Delete(p.names, i, i+1)
	}
}

// RemoveWorker removes worker id from its pool (see Router.RemoveWorker).
func (p *Pools) RemoveWorker(id kvevent.WorkerID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.worker[id]
	if !ok {
		return p.idx.RemoveWorker(id)
	}
	return p.leaveLocked(id, m)
}

// SetDown marks worker id DOWN or back up in its pool; false when unknown.
func (p *Pools) SetDown(id kvevent.WorkerID, down bool) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	m, ok := p.worker[id]
	return ok && p.pools[m].SetDown(id, down)
}

// ApplyEvent folds a KV event into the shared index.
func (p *Pools) ApplyEvent(ev kvevent.Event) error { return p.idx.Apply(ev) }

// route returns req's pool, and whether request ids must be remembered.
func (p *Pools) route(req Request) (*Router, bool, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	r, ok := p.pools[p.name(req.Model)]
	if !ok {
		return nil, false, fmt.Errorf("routing %q: model %q: %w: %w", req.ID, req.Model, ErrUnknownModel, ErrNoCandidates)
	}
	return r, len(p.pools) > 1, nil
}

// Route routes and books req in its model's pool (see Router.Route).
// Errors: those of Router.Route, or ErrUnknownModel.
func (p *Pools) Route(req Request) (Decision, error) {
	r, many, err := p.route(req)
	if err != nil {
		return Decision{}, err
	}
	d, err := r.Route(req)
	if err == nil && d.Booked && many {
		p.reqMu.Lock()
		p.reqs[req.ID] = r
		p.reqMu.Unlock()
	}
	return d, err
}

// Plan is Route without booking (see Router.Plan).
func (p *Pools) Plan(req Request) (Decision, error) {
	r, _, err := p.route(req)
	if err != nil {
		return Decision{}, err
	}
	return r.Plan(req)
}

// LocalHashes returns req's local block hashes with its pool's block size.
func (p *Pools) LocalHashes(req Request) ([]uint64, error) {
	r, _, err := p.route(req)
	if err != nil {
		return nil, err
	}
	return r.LocalHashes(req)
}

// booked returns the pool request id is booked in (the default pool when
// ids are not remembered), forgetting it when forget is set.
func (p *Pools) booked(id string, forget bool) (*Router, bool) {
	p.reqMu.Lock()
	r, ok := p.reqs[id]
	if ok && forget {
		delete(p.reqs, id)
	}
	p.reqMu.Unlock()
	if ok {
		return r, true
	}
	return p.Pool("")
}

// MarkPrefillCompleted records request id's first output token in its pool.
func (p *Pools) MarkPrefillCompleted(id string) bool {
	r, ok := p.booked(id, false)
	return ok && r.MarkPrefillCompleted(id)
}

// Free ends request id in its pool; idempotent.
func (p *Pools) Free(id string) bool {
	r, ok := p.booked(id, true)
	return ok && r.Free(id)
}

// SetGenerated reports request id's generated-token count to its pool.
func (p *Pools) SetGenerated(id string, tokens int) bool {
	r, ok := p.booked(id, false)
	return ok && r.SetGenerated(id, tokens)
}

// all returns every pool, in model order.
func (p *Pools) all() []*Router {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]*Router, 0, len(p.names))
	for _, n := range p.names {
		out = append(out, p.pools[n])
	}
	return out
}

// Sweep sweeps every pool (see Router.Sweep) and returns the freed ids.
func (p *Pools) Sweep() []string {
	var ids []string
	for _, r := range p.all() {
		ids = append(ids, r.Sweep()...)
	}
	if len(ids) > 0 {
		p.reqMu.Lock()
		for _, id := range ids {
			delete(p.reqs, id)
		}
		p.reqMu.Unlock()
	}
	return ids
}

// Loads returns every pool's worker ranks' loads, sorted by worker rank.
func (p *Pools) Loads() []Load {
	var out []Load
	for _, r := range p.all() {
		out = append(out, r.Loads()...)
	}
	slices.SortFunc(out, func(a, b Load) int {
		if c := cmpID(a.Worker.ID, b.Worker.ID); c != 0 {
			return c
		}
		return int(a.Worker.Rank) - int(b.Worker.Rank)
	})
	return out
}

// Workers returns every pool's workers, sorted by id, with their DOWN flag.
func (p *Pools) Workers() (infos []WorkerInfo, down []bool) {
	type row struct {
		info WorkerInfo
		down bool
	}
	var rows []row
	for _, r := range p.all() {
		in, dn := r.Workers()
		for i := range in {
			rows = append(rows, row{in[i], dn[i]})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmpID(a.info.ID, b.info.ID) })
	for _, x := range rows {
		infos = append(infos, x.info)
		down = append(down, x.down)
	}
	return infos, down
}

func cmpID(a, b kvevent.WorkerID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Config returns the default pool's configuration.
func (p *Pools) Config() Config {
	r, _ := p.Pool("")
	return r.Config()
}

// Stats returns the pools' counters, summed.
func (p *Pools) Stats() Stats {
	s := Stats{RemoteUnknownModel: p.unknownRemote.Load()}
	s.RemoteDropped = s.RemoteUnknownModel
	for _, r := range p.all() {
		x := r.Stats()
		s.Routed += x.Routed
		s.Rejected += x.Rejected
		s.RemoteApplied += x.RemoteApplied
		s.RemoteDropped += x.RemoteDropped
		s.IndexErrors += x.IndexErrors
		s.Sequences.UnknownIDs += x.Sequences.UnknownIDs
		s.Sequences.Expired += x.Sequences.Expired
	}
	return s
}

// Observe feeds a measured sample to worker rank w's pool (see
// Router.Observe); false when w is in no pool.
func (p *Pools) Observe(w kvevent.WorkerRank, s Sample, now time.Time) bool {
	p.mu.RLock()
	m, ok := p.worker[w.ID]
	r := p.pools[m]
	p.mu.RUnlock()
	return ok && r.Observe(w, s, now)
}

// PrefillModel returns worker rank w's PrefillModel from its pool (see
// Router.PrefillModel); false when w is in no pool.
func (p *Pools) PrefillModel(w kvevent.WorkerRank) (PrefillModel, bool) {
	p.mu.RLock()
	m, ok := p.worker[w.ID]
	r := p.pools[m]
	p.mu.RUnlock()
	if !ok {
		return PrefillModel{}, false
	}
	return r.PrefillModel(w)
}

// TimeModels returns every pool's observed worker ranks' models, sorted
// by worker rank.
func (p *Pools) TimeModels() []TimeModel {
	var out []TimeModel
	for _, r := range p.all() {
		out = append(out, r.TimeModels()...)
	}
	slices.SortFunc(out, func(a, b TimeModel) int {
		if c := cmpID(a.Worker.ID, b.Worker.ID); c != 0 {
			return c
		}
		return int(a.Worker.Rank) - int(b.Worker.Rank)
	})
	return out
}

// Saturated reports whether every pool is saturated (see
// Router.Saturated): the fleet-wide judgement. The admission queue meters
// each model by its own pool (PoolSaturated): a fleet with one model
// saturated and another idle is not saturated, yet the first model's
// requests must wait.
func (p *Pools) Saturated(t scheduler.Thresholds) bool {
	for _, r := range p.all() {
		if !r.Saturated(t) {
			return false
		}
	}
	return true
}

// PoolSaturated reports whether model's pool ("" is the default model's,
// as Route names it) is saturated, judged per hop (see
// Router.HopsSaturated; Router.Saturated in an aggregated pool): what the front
// door's admission queue meters that model's requests by. A model with no
// pool is not saturated: its requests are not held, and Route refuses
// them at once (ErrUnknownModel) rather than after a wait.
func (p *Pools) PoolSaturated(model string, t scheduler.Thresholds) bool {
	r, ok := p.Pool(model)
	return ok && r.HopsSaturated(t)
}

// WorkersSaturated reports whether model's pool is saturated judged
// among the workers in allowed only (see Router.WorkersSaturated; every
// worker of the pool when allowed is empty): what the front door's
// admission queue meters a LoRA adapter's requests by, allowed being the
// workers with the adapter loaded. Workers of another pool in allowed are
// ignored. A model with no pool is not saturated (see PoolSaturated).
func (p *Pools) WorkersSaturated(model string, t scheduler.Thresholds, allowed []kvevent.WorkerID) bool {
	r, ok := p.Pool(model)
	return ok && r.WorkersSaturated(model, t, allowed)
}

// RankSaturated judges worker rank w in its pool (see
// Router.RankSaturated); an unknown rank is saturated.
func (p *Pools) RankSaturated(t scheduler.Thresholds, w kvevent.WorkerRank) bool {
	p.mu.RLock()
	m, ok := p.worker[w.ID]
	r := p.pools[m]
	p.mu.RUnlock()
	return !ok || r.RankSaturated(t, w)
}

// HasRole reports whether any pool has a worker that takes the role (see
// Router.HasRole).
func (p *Pools) HasRole(role Role) bool {
	for _, r := range p.all() {
		if r.HasRole(role) {
			return true
		}
	}
	return false
}
