package replica

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/router"
)

// shadowPrefix starts every shadow booking's request id; real request ids
// never start with a NUL byte.
const shadowPrefix = "\x00shadow:"

// deadMemory is how long a departed replica's id is remembered (its late
// events dropped) unless it announces itself again.
const deadMemory = time.Hour

// CoreConfig configures the network-free part of replica sync.
type CoreConfig struct {
	// Shadows turns anti-herding shadow bookings on. Default true.
	Shadows bool
	// ShadowTTL is a shadow booking's lifetime. Default 10 ms.
	ShadowTTL time.Duration
}

// CoreStats counts what the core did.
type CoreStats struct {
	// Applied counts peers' events applied to the router.
	Applied uint64
	// Unapplied counts peers' events the router could not apply (unknown
	// worker or request, duplicate id).
	Unapplied uint64
	// Own counts events carrying this router's id (ignored).
	Own uint64
	// FromDeparted counts events of replicas already declared gone.
	FromDeparted uint64
	// PeerFreed counts bookings freed because their replica went away.
	PeerFreed uint64
	// SnapshotApplied counts bookings taken from peers' snapshots.
	SnapshotApplied uint64
	// ShadowsBooked, ShadowsReplaced and ShadowsExpired count shadow
	// bookings made, replaced by a real booking of their peer, and ended by
	// their TTL or their request's end.
	ShadowsBooked, ShadowsReplaced, ShadowsExpired uint64
}

type booking struct {
	add  router.LifecycleEvent
	done bool // prefill completed
}

type shadow struct {
	peer   uint64
	origin string
	at     time.Time
}

// Core is replica sync without the network: it observes the local router,
// hands its lifecycle events to emit, applies peers' events, frees the
// bookings of departed peers, serves and applies snapshots, and books the
// anti-herding shadows. It does no I/O, starts no goroutines and takes the
// time as an argument. Its methods are safe for concurrent use.
type Core struct {
	r       *router.Router
	self    uint64
	cfg     CoreConfig
	emit    func(router.LifecycleEvent)
	observe router.Observer

	// apply serialises everything that writes peers' state into the
	// router; lock order: apply, then the router's lock, then mu.
	apply    sync.Mutex
	peers    map[uint64]struct{}
	dead     map[uint64]time.Time
	remote   map[uint64]map[string]struct{}
	shadows  map[string]shadow
	fifo     map[uint64][]string // shadow ids per peer, oldest first
	byOrigin map[string][]string // shadow ids per local request
	tomb     map[string]struct{} // ids freed while a snapshot is applied
	next     uint64

	mu     sync.Mutex // the observer's state
	local  map[string]*booking
	ended  []string // local requests freed since the last drain
	stats  CoreStats
	peersN int // len(peers), readable under mu
}

// NewCore attaches a core to r (as its observer). emit receives the
// router's own lifecycle events, on the routing goroutine and under the
// router's lock: it must not block or call the router.
func NewCore(r *router.Router, cfg CoreConfig, emit func(router.LifecycleEvent)) *Core {
	c := &Core{
		r:        r,
		self:     r.Config().RouterID,
		cfg:      cfg,
		emit:     emit,
		peers:    map[uint64]struct{}{},
		dead:     map[uint64]time.Time{},
		remote:   map[uint64]map[string]struct{}{},
		shadows:  map[string]shadow{},
		fifo:     map[uint64][]string{},
		byOrigin: map[string][]string{},
		local:    map[string]*booking{},
	}
	c.observe = c.onLocal
	r.SetObserver(c.observe)
	return c
}

// Detach stops observing the router.
func (c *Core) Detach() { c.r.SetObserver(nil) }

// RouterID returns the local router's id.
func (c *Core) RouterID() uint64 { return c.self }

func (c *Core) onLocal(ev router.LifecycleEvent) {
	c.mu.Lock()
	switch ev.Kind {
	case router.AddRequest:
		c.local[ev.RequestID] = &booking{add: ev}
	case router.MarkPrefillCompleted:
		if b := c.local[ev.RequestID]; b != nil {
			b.done = true
		}
	case router.Free:
		delete(c.local, ev.RequestID)
		if c.cfg.Shadows {
			c.ended = append(c.ended, ev.RequestID)
		}
	}
	c.mu.Unlock()
	if c.emit != nil {
		c.emit(ev)
	}
}

// Route routes req on the local router and, when shadows are on and peers
// are live, books one shadow of the decision per live peer (see doc.go).
func (c *Core) Route(req router.Request, now time.Time) (router.Decision, error) {
	c.Tick(now)
	d, err := c.r.Route(req)
	if err != nil || !d.Booked || !c.cfg.Shadows {
		return d, err
	}
	c.mu.Lock()
	b := c.local[req.ID]
	var add router.LifecycleEvent
	if b != nil {
		add = b.add
	}
	live := c.peersN > 0
	c.mu.Unlock()
	if b == nil || !live {
		return d, nil
	}
	c.apply.Lock()
	defer c.apply.Unlock()
	for _, p := range c.sortedPeers() {
		c.next++
		id := shadowPrefix + strconv.FormatUint(c.self, 10) + ":" + strconv.FormatUint(c.next, 10)
		ev := add
		ev.RouterID, ev.RequestID = p, id
		if !c.r.ApplyRemote(ev) {
			continue
		}
		c.shadows[id] = shadow{peer: p, origin: req.ID, at: now}
		c.fifo[p] = append(c.fifo[p], id)
		c.byOrigin[req.ID] = append(c.byOrigin[req.ID], id)
		c.count(func(s *CoreStats) { s.ShadowsBooked++ })
	}
	return d, nil
}

func (c *Core) sortedPeers() []uint64 {
	ps := make([]uint64, 0, len(c.peers))
	for p := range c.peers {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (c *Core) count(f func(*CoreStats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// Tick ends shadows whose TTL has passed at now, and those of local
// requests that ended. Call it periodically (Sync does, every ShadowTTL).
func (c *Core) Tick(now time.Time) {
	if !c.cfg.Shadows {
		return
	}
	c.mu.Lock()
	ended := c.ended
	c.ended = nil
	c.mu.Unlock()
	c.apply.Lock()
	defer c.apply.Unlock()
	for _, origin := range ended {
		for _, id := range c.byOrigin[origin] {
			c.endShadow(id, false)
		}
		delete(c.byOrigin, origin)
	}
	for p, q := range c.fifo {
		for len(q) > 0 {
			s, ok := c.shadows[q[0]]
			if ok && s.at.Add(c.cfg.ShadowTTL).After(now) {
				break
			}
			if ok {
				c.endShadow(q[0], false)
			}
			q = q[1:]
		}
		if len(q) == 0 {
			delete(c.fifo, p)
		} else {
			c.fifo[p] = q
		}
	}
}

// endShadow frees one shadow (apply held). The fifo and byOrigin entries
// are dropped lazily.
func (c *Core) endShadow(id string, replaced bool) {
	s, ok := c.shadows[id]
	if !ok {
		return
	}
	delete(c.shadows, id)
	c.r.ApplyRemote(router.LifecycleEvent{Kind: router.Free, RouterID: s.peer, RequestID: id})
	if ids := c.byOrigin[s.origin]; len(ids) > 0 {
		c.byOrigin[s.origin] = slices.DeleteFunc(ids, func(x string) bool { return x == id })
		if len(c.byOrigin[s.origin]) == 0 {
			delete(c.byOrigin, s.origin)
		}
	}
	c.count(func(st *CoreStats) {
		if replaced {
			st.ShadowsReplaced++
		} else {
			st.ShadowsExpired++
		}
	})
}

// Receive applies a peer's lifecycle event. Events carrying this router's
// id, or the id of a replica declared gone, are ignored. A peer's real
// booking replaces the oldest shadow booked on its behalf.
func (c *Core) Receive(ev router.LifecycleEvent) {
	c.apply.Lock()
	defer c.apply.Unlock()
	c.receive(ev, false)
}

func (c *Core) receive(ev router.LifecycleEvent, fromSnapshot bool) {
	rid := ev.RouterID
	switch {
	case rid == c.self:
		c.count(func(s *CoreStats) { s.Own++ })
		return
	case strings.HasPrefix(ev.RequestID, shadowPrefix):
		c.count(func(s *CoreStats) { s.Unapplied++ })
		return
	}
	if _, gone := c.dead[rid]; gone {
		c.count(func(s *CoreStats) { s.FromDeparted++ })
		return
	}
	if c.tomb != nil && ev.Kind == router.Free {
		c.tomb[ev.RequestID] = struct{}{}
	}
	ok := c.r.ApplyRemote(ev)
	switch ev.Kind {
	case router.AddRequest:
		if ok {
			m := c.remote[rid]
			if m == nil {
				m = map[string]struct{}{}
				c.remote[rid] = m
			}
			m[ev.RequestID] = struct{}{}
		}
		if !fromSnapshot {
			c.replaceShadow(rid)
		}
	case router.Free:
		if m := c.remote[rid]; m != nil {
			delete(m, ev.RequestID)
			if len(m) == 0 {
				delete(c.remote, rid)
			}
		}
	}
	c.count(func(s *CoreStats) {
		switch {
		case ok && fromSnapshot:
			if ev.Kind == router.AddRequest {
				s.SnapshotApplied++
			}
		case ok:
			s.Applied++
		default:
			s.Unapplied++
		}
	})
}

func (c *Core) replaceShadow(peer uint64) {
	q := c.fifo[peer]
	for len(q) > 0 {
		id := q[0]
		q = q[1:]
		if _, ok := c.shadows[id]; ok {
			c.endShadow(id, true)
			break
		}
	}
	if len(q) == 0 {
		delete(c.fifo, peer)
	} else {
		c.fifo[peer] = q
	}
}

// PeerUp records a live peer replica (shadows are booked for live peers
// only). A replica that had been declared gone is accepted again; PeerUp
// then returns true, and its bookings (freed here when it left) should be
// fetched again with a snapshot.
func (c *Core) PeerUp(id uint64) (returned bool) {
	if id == c.self {
		return false
	}
	c.apply.Lock()
	defer c.apply.Unlock()
	_, returned = c.dead[id]
	delete(c.dead, id)
	c.peers[id] = struct{}{}
	c.setPeersN()
	return returned
}

// Prune forgets peers' requests the router no longer books (the tracker
// expired them because their Free was lost), so that the per-peer lists
// do not grow. It returns the number forgotten.
func (c *Core) Prune() int {
	c.apply.Lock()
	defer c.apply.Unlock()
	n := 0
	for rid, m := range c.remote {
		for id := range m {
			if !c.r.Booked(id) {
				delete(m, id)
				n++
			}
		}
		if len(m) == 0 {
			delete(c.remote, rid)
		}
	}
	return n
}

func (c *Core) setPeersN() {
	c.mu.Lock()
	c.peersN = len(c.peers)
	c.mu.Unlock()
}

// PeerDown declares a peer gone (deregistered or expired): every booking it
// made, and every shadow booked on its behalf, is freed, and its later
// events are dropped until it announces itself again. It returns the
// number of bookings freed.
func (c *Core) PeerDown(id uint64, now time.Time) int {
	if id == c.self {
		return 0
	}
	c.apply.Lock()
	defer c.apply.Unlock()
	delete(c.peers, id)
	c.setPeersN()
	for p, at := range c.dead {
		if now.Sub(at) > deadMemory {
			delete(c.dead, p)
		}
	}
	c.dead[id] = now
	freed := 0
	for rid := range c.remote[id] {
		if c.r.ApplyRemote(router.LifecycleEvent{Kind: router.Free, RouterID: id, RequestID: rid}) {
			freed++
		}
	}
	delete(c.remote, id)
	for _, sid := range c.fifo[id] {
		c.endShadow(sid, false)
	}
	delete(c.fifo, id)
	c.count(func(s *CoreStats) { s.PeerFreed += uint64(freed) })
	return freed
}

// Peers returns the live peers' ids, sorted.
func (c *Core) Peers() []uint64 {
	c.apply.Lock()
	defer c.apply.Unlock()
	return c.sortedPeers()
}

// Snapshot returns the local router's own bookings as lifecycle events
// that rebuild them: AddRequest for each, then MarkPrefillCompleted for
// those past their prefill. Sorted by request id.
func (c *Core) Snapshot() []router.LifecycleEvent {
	c.mu.Lock()
	ids := make([]string, 0, len(c.local))
	for id := range c.local {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]router.LifecycleEvent, 0, len(ids))
	var marks []router.LifecycleEvent
	for _, id := range ids {
		b := c.local[id]
		out = append(out, b.add)
		if b.done {
			marks = append(marks, router.LifecycleEvent{Kind: router.MarkPrefillCompleted, RouterID: c.self, RequestID: id, Worker: b.add.Worker})
		}
	}
	c.mu.Unlock()
	return append(out, marks...)
}

// BeginSnapshot starts remembering the requests peers free, so that a
// snapshot applied afterwards does not resurrect them. Pair it with
// EndSnapshot.
func (c *Core) BeginSnapshot() {
	c.apply.Lock()
	c.tomb = map[string]struct{}{}
	c.apply.Unlock()
}

// ApplySnapshot applies peer from's snapshot events (events not stamped
// with from, and requests freed since BeginSnapshot, are skipped). It
// returns the number of bookings applied.
func (c *Core) ApplySnapshot(from uint64, evs []router.LifecycleEvent) int {
	c.apply.Lock()
	defer c.apply.Unlock()
	before := c.snapshotApplied()
	for _, ev := range evs {
		if ev.RouterID != from {
			continue
		}
		if _, freed := c.tomb[ev.RequestID]; freed {
			continue
		}
		c.receive(ev, true)
	}
	return int(c.snapshotApplied() - before)
}

func (c *Core) snapshotApplied() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.SnapshotApplied
}

// EndSnapshot stops remembering freed requests.
func (c *Core) EndSnapshot() {
	c.apply.Lock()
	c.tomb = nil
	c.apply.Unlock()
}

// Stats returns the core's counters.
func (c *Core) Stats() CoreStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
