package core

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

// Config configures the network-free part of replica sync.
type Config struct {
	// Shadows turns anti-herding shadow bookings on. Default true.
	Shadows bool
	// ShadowTTL is a shadow booking's lifetime. Default 10 ms.
	ShadowTTL time.Duration
	// Epoch identifies this incarnation of the router in its event stream
	// and must grow across restarts of a router that keeps its id (replica.Sync
	// uses the start time in Unix nanoseconds). 0 means 1.
	Epoch uint64
}

// Stats counts what the core did.
type Stats struct {
	// Applied counts peers' events applied to the router.
	Applied uint64
	// Unapplied counts peers' events the router could not apply (unknown
	// worker or request, duplicate id).
	Unapplied uint64
	// Own counts events carrying this router's id (ignored).
	Own uint64
	// FromDeparted counts events of replicas already declared gone.
	FromDeparted uint64
	// Unannounced counts events, snapshots and claims refused because
	// their router id has no live membership record (never joined, or
	// its record is not seen yet): anyone who can publish on the subject
	// can make up a router id, and its bookings would stick.
	Unannounced uint64
	// PeerFreed counts bookings freed because their replica went away.
	PeerFreed uint64
	// SnapshotApplied counts bookings taken from peers' snapshots (at
	// start and when reconciling).
	SnapshotApplied uint64
	// ResyncFreed counts bookings freed because a peer's snapshot no
	// longer had them (their Free was lost).
	ResyncFreed uint64
	// Stale counts sequenced events already covered (a duplicate, or an
	// event older than a snapshot applied since) and not applied.
	Stale uint64
	// Gaps counts holes detected in peers' event streams (each asks for
	// a resync).
	Gaps uint64
	// LocalDropped counts this router's bookings it dropped without a
	// Free (worker removed, booking expired) for which a Free was
	// published afterwards (DropLost).
	LocalDropped uint64
	// ShadowsBooked, ShadowsReplaced and ShadowsExpired count shadow
	// bookings made, replaced by a real booking of their peer, and ended by
	// their TTL or their request's end.
	ShadowsBooked, ShadowsReplaced, ShadowsExpired uint64
}

type booking struct {
	add  router.LifecycleEvent
	done bool // prefill completed
}

// stream is what the core knows of one peer's event stream.
type stream struct {
	epoch, last uint64 // position of the latest event applied or covered
	// log holds the peer's events received while a snapshot of it is in
	// flight (nil when none is).
	log []Event
	// claimEpoch, claim: the position the peer said it had reached (in
	// its snapshot requests), when ahead of ours; claimAt is when first
	// seen (zero when no claim is outstanding).
	claimEpoch, claim uint64
	claimAt           time.Time
}

func (st *stream) behind(epoch, seq uint64) bool {
	return epoch > st.epoch || epoch == st.epoch && seq > st.last
}

// settleClaim forgets the peer's outstanding claim once the stream has
// reached the position it claimed.
func (st *stream) settleClaim() {
	if st.claimAt != (time.Time{}) && !st.behind(st.claimEpoch, st.claim) {
		st.claimAt = time.Time{}
	}
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
	r       Target
	self    uint64
	cfg     Config
	emit    func(Event)
	observe router.Observer

	// apply serialises everything that writes peers' state into the
	// router; lock order: apply, then the router's lock, then mu.
	apply    sync.Mutex
	peers    map[uint64]struct{}
	dead     map[uint64]time.Time
	remote   map[uint64]map[string]bool // peer → request → prefill done
	streams  map[uint64]*stream
	shadows  map[string]shadow
	fifo     map[uint64][]string // shadow ids per peer, oldest first
	byOrigin map[string][]string // shadow ids per local request
	next     uint64

	mu     sync.Mutex // the observer's state
	epoch  uint64
	seq    uint64 // last event stamped
	local  map[string]*booking
	ended  []string // local requests freed since the last drain
	stats  Stats
	peersN int // len(peers), readable under mu
}

// New attaches a core to r: as its observer and, when cfg.Shadows, as
// the shadow booking around its Route (router.Shadows). emit receives the
// router's own lifecycle events, numbered, in order, on the routing
// goroutine under the router's lock (or, for the Frees of DropLost, on
// the caller's): it must not block or call the router or the core.
func New(r Target, cfg Config, emit func(Event)) *Core {
	c := &Core{
		epoch:    max(cfg.Epoch, 1),
		r:        r,
		self:     r.Config().RouterID,
		cfg:      cfg,
		emit:     emit,
		peers:    map[uint64]struct{}{},
		dead:     map[uint64]time.Time{},
		remote:   map[uint64]map[string]bool{},
		streams:  map[uint64]*stream{},
		shadows:  map[string]shadow{},
		fifo:     map[uint64][]string{},
		byOrigin: map[string][]string{},
		local:    map[string]*booking{},
	}
	c.observe = c.onLocal
	r.SetObserver(c.observe)
	if cfg.Shadows {
		r.SetShadows(c)
	}
	return c
}

var _ router.Shadows = (*Core)(nil)

// Target is what a core shares: one router (*router.Router), or every
// model pool of one (*router.Pools, whose events name their pool in
// LifecycleEvent.Model). Request ids are unique across its pools.
type Target interface {
	// Config returns the (default pool's) configuration: its RouterID.
	Config() router.Config
	// SetObserver attaches the core to the local lifecycle events.
	SetObserver(router.Observer)
	// SetShadows attaches the core's shadow booking to Route.
	SetShadows(router.Shadows)
	// ApplyRemote applies a peer's event; false when it could not.
	ApplyRemote(router.LifecycleEvent) bool
	// Booked reports whether a request is booked.
	Booked(id string) bool
}

var (
	_ Target = (*router.Router)(nil)
	_ Target = (*router.Pools)(nil)
)

// Detach stops observing the router and booking shadows on its Routes.
func (c *Core) Detach() {
	c.r.SetObserver(nil)
	c.r.SetShadows(nil)
}

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
	c.stamp(ev)
	c.mu.Unlock()
}

// stamp numbers ev and hands it to emit (mu held: events leave in the
// order of their numbers).
func (c *Core) stamp(ev router.LifecycleEvent) {
	c.seq++
	if c.emit != nil {
		c.emit(Event{LifecycleEvent: ev, Epoch: c.epoch, Seq: c.seq})
	}
}

// Position returns this router's stream position: its epoch and the
// number of its latest event.
func (c *Core) Position() (epoch, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch, c.seq
}

// BookShadows books, when peers are live, one shadow of the local request
// origin's booking per live peer (see doc.go). The router calls it after
// each Route that booked (router.Shadows); it does nothing for a request
// it did not see booked.
func (c *Core) BookShadows(origin string, now time.Time) {
	c.mu.Lock()
	b := c.local[origin]
	var add router.LifecycleEvent
	if b != nil {
		add = b.add
	}
	live := c.peersN > 0
	c.mu.Unlock()
	if b == nil || !live {
		return
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
		c.shadows[id] = shadow{peer: p, origin: origin, at: now}
		c.fifo[p] = append(c.fifo[p], id)
		c.byOrigin[origin] = append(c.byOrigin[origin], id)
		c.count(func(s *Stats) { s.ShadowsBooked++ })
	}
}

func (c *Core) sortedPeers() []uint64 {
	ps := make([]uint64, 0, len(c.peers))
	for p := range c.peers {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

func (c *Core) count(f func(*Stats)) {
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
	c.count(func(st *Stats) {
		if replaced {
			st.ShadowsReplaced++
		} else {
			st.ShadowsExpired++
		}
	})
}

// Receive applies a peer's lifecycle event. Events carrying this router's
// id, or the id of a replica declared gone, are ignored; so are those of a
// router id that is not a live peer (PeerUp): nothing is kept for it. A
// peer's events that arrive before its membership record are thus
// refused; the caller fetches its snapshot when it joins. A peer's real
// booking replaces the oldest shadow booked on its behalf.
//
// Sequenced events are checked against the peer's stream: one already
// covered (duplicate, or older than a snapshot applied since) is dropped;
// one after a hole is applied and Receive returns true: events were lost,
// and the caller should fetch the peer's snapshot (BeginResync,
// ApplySnapshot, EndResync). It also returns true for the first event
// of a peer incarnation it has not seen start, unless a snapshot of that
// peer is in flight (the snapshot will tell).
func (c *Core) Receive(ev Event) (resync bool) {
	c.apply.Lock()
	defer c.apply.Unlock()
	rid := ev.RouterID
	switch {
	case rid == c.self:
		c.count(func(s *Stats) { s.Own++ })
		return false
	case strings.HasPrefix(ev.RequestID, shadowPrefix):
		c.count(func(s *Stats) { s.Unapplied++ })
		return false
	}
	if _, gone := c.dead[rid]; gone {
		c.count(func(s *Stats) { s.FromDeparted++ })
		return false
	}
	if _, live := c.peers[rid]; !live {
		c.count(func(s *Stats) { s.Unannounced++ })
		return false
	}
	st := c.stream(rid)
	if ev.Seq != 0 {
		switch {
		case !st.behind(ev.Epoch, ev.Seq):
			c.count(func(s *Stats) { s.Stale++ })
			return false
		case ev.Epoch > st.epoch:
			// A peer incarnation seen for the first time: unless this is
			// its very first event and nothing is held for the peer, we
			// may have missed events (or hold a predecessor's bookings).
			resync = !(st.epoch == 0 && ev.Seq == 1 && len(c.remote[rid]) == 0)
		case ev.Seq > st.last+1:
			c.count(func(s *Stats) { s.Gaps++ })
			resync = true
		}
		st.epoch, st.last = ev.Epoch, ev.Seq
		st.settleClaim()
	}
	if st.log != nil {
		st.log = append(st.log, ev)
		resync = false // the snapshot in flight is checked against the log
	}
	c.applyEvent(ev.LifecycleEvent, false)
	return resync
}

func (c *Core) stream(peer uint64) *stream {
	st := c.streams[peer]
	if st == nil {
		st = &stream{}
		c.streams[peer] = st
	}
	return st
}

// applyEvent applies a peer's event to the router and the per-peer
// bookings (apply held).
func (c *Core) applyEvent(ev router.LifecycleEvent, fromSnapshot bool) {
	rid := ev.RouterID
	ok := c.r.ApplyRemote(ev)
	switch ev.Kind {
	case router.AddRequest:
		if ok {
			m := c.remote[rid]
			if m == nil {
				m = map[string]bool{}
				c.remote[rid] = m
			}
			m[ev.RequestID] = false
		}
		if !fromSnapshot {
			c.replaceShadow(rid)
		}
	case router.MarkPrefillCompleted:
		if m := c.remote[rid]; m != nil {
			if _, held := m[ev.RequestID]; held {
				m[ev.RequestID] = true
			}
		}
	case router.Free:
		if m := c.remote[rid]; m != nil {
			delete(m, ev.RequestID)
			if len(m) == 0 {
				delete(c.remote, rid)
			}
		}
	}
	c.count(func(s *Stats) {
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

// Prune forgets peers' requests the router no longer books (the ledger
// expired them because their Free was lost, or their worker was removed),
// so that the per-peer lists do not grow, after DropLost. It returns the
// number of peers' requests forgotten.
func (c *Core) Prune() int {
	c.DropLost()
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
	delete(c.streams, id)
	for _, sid := range c.fifo[id] {
		c.endShadow(sid, false)
	}
	delete(c.fifo, id)
	c.count(func(s *Stats) { s.PeerFreed += uint64(freed) })
	return freed
}

// Holds reports whether the core keeps anything for router id: a stream
// position, or bookings made by it.
func (c *Core) Holds(id uint64) bool {
	c.apply.Lock()
	defer c.apply.Unlock()
	_, st := c.streams[id]
	_, rm := c.remote[id]
	return st || rm
}

// Member reports whether id is a live peer (announced with PeerUp and not
// declared gone since).
func (c *Core) Member(id uint64) bool {
	c.apply.Lock()
	defer c.apply.Unlock()
	_, live := c.peers[id]
	return live
}

// Peers returns the live peers' ids, sorted.
func (c *Core) Peers() []uint64 {
	c.apply.Lock()
	defer c.apply.Unlock()
	return c.sortedPeers()
}

// Snapshot returns the local router's own bookings and the stream
// position they reflect: AddRequest for each, then MarkPrefillCompleted
// for those past their prefill, sorted by request id.
//
// Only bookings the router still holds are included: the router drops
// some without a lifecycle event (RemoveWorker frees a removed worker's
// requests on every replica by itself; the ledger expires bookings whose
// Free was lost), and a snapshot listing them would resurrect them on
// every peer at each resync. Such entries are forgotten here, with a
// Free published for each (see DropLost).
func (c *Core) Snapshot() Snapshot {
	c.mu.Lock()
	ids := make([]string, 0, len(c.local))
	for id := range c.local {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	snap := Snapshot{RouterID: c.self, Epoch: c.epoch, Seq: c.seq}
	books := make([]booking, len(ids))
	for i, id := range ids {
		books[i] = *c.local[id]
	}
	c.mu.Unlock()
	// Booked takes the router's lock, which is taken before mu (the
	// observer runs under it): checked outside mu. A booking freed in
	// between has a Free event after snap.Seq; one dropped silently is
	// left out, as it should be.
	var stale []string
	var marks []router.LifecycleEvent
	for i, id := range ids {
		if !c.r.Booked(id) {
			stale = append(stale, id)
			continue
		}
		snap.Events = append(snap.Events, books[i].add)
		if books[i].done {
			marks = append(marks, router.LifecycleEvent{Kind: router.MarkPrefillCompleted, RouterID: c.self, RequestID: id, Model: books[i].add.Model, Worker: books[i].add.Worker})
		}
	}
	snap.Events = append(snap.Events, marks...)
	c.forgetStale(stale)
	return snap
}

// forgetStale drops local entries the router no longer books and
// publishes a Free for each, so that peers that did not drop them too
// (one that missed a worker's removal in the registry) free them now
// rather than at the next resync. Booked is checked outside mu (lock
// order); the router's own Free deletes an entry under the router's lock,
// so an entry still here once Booked said no was dropped silently.
func (c *Core) forgetStale(ids []string) (n int) {
	for _, id := range ids {
		if c.r.Booked(id) {
			continue
		}
		c.mu.Lock()
		if b := c.local[id]; b != nil {
			delete(c.local, id)
			if c.cfg.Shadows {
				c.ended = append(c.ended, id)
			}
			c.stamp(router.LifecycleEvent{Kind: router.Free, RouterID: c.self, RequestID: id, Model: b.add.Model, Worker: b.add.Worker})
			c.stats.LocalDropped++
			n++
		}
		c.mu.Unlock()
	}
	return n
}

// DropLost finds the router's own bookings it dropped without a Free
// (RemoveWorker frees a removed worker's requests silently; the ledger
// expires bookings), forgets them and publishes a Free for each. It
// returns how many. Sync calls it every second.
func (c *Core) DropLost() int {
	c.mu.Lock()
	ids := make([]string, 0, len(c.local))
	for id := range c.local {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	var stale []string
	for _, id := range ids {
		if !c.r.Booked(id) {
			stale = append(stale, id)
		}
	}
	return c.forgetStale(stale)
}

// BeginResync starts recording peer's events, so that a snapshot of the
// peer requested afterwards can be reconciled with what arrives while it
// is in flight. Call it before sending the request; pair it with
// EndResync. One resync per peer at a time.
func (c *Core) BeginResync(peer uint64) {
	c.apply.Lock()
	c.stream(peer).log = []Event{}
	c.apply.Unlock()
}

// EndResync stops recording peer's events.
func (c *Core) EndResync(peer uint64) {
	c.apply.Lock()
	if st := c.streams[peer]; st != nil {
		st.log = nil
	}
	c.apply.Unlock()
}

// ApplySnapshot reconciles what this router holds for snap's router with
// the snapshot (taken after BeginResync): the peer's bookings become
// exactly the snapshot's plus the peer's events received since
// BeginResync that the snapshot does not cover. Bookings held but absent
// are freed (their Free was lost), missing ones added, prefill marks
// completed. It returns the number of bookings added and freed, and
// again = true when the result may still be incomplete (a hole among the
// events after the snapshot, or the snapshot is of an older incarnation
// than events already seen): fetch another snapshot. Snapshots of this
// router, of a replica declared gone or of one that is not a live peer
// are ignored.
func (c *Core) ApplySnapshot(snap Snapshot) (added, freed int, again bool) {
	c.apply.Lock()
	defer c.apply.Unlock()
	peer := snap.RouterID
	if !c.snapshotFollowed(peer) {
		return 0, 0, false
	}
	st := c.stream(peer)
	sequenced := snap.Seq != 0 || snap.Epoch != 0
	if sequenced && snap.Epoch < st.epoch {
		return 0, 0, true
	}
	want, again := snapshotTarget(snap, st.log, sequenced)
	freed = c.freeUnwanted(peer, want)
	added = c.addWanted(peer, want)
	if sequenced && st.behind(snap.Epoch, snap.Seq) {
		st.epoch, st.last = snap.Epoch, snap.Seq
	}
	st.settleClaim()
	c.count(func(s *Stats) { s.ResyncFreed += uint64(freed) })
	return added, freed, again
}

// snapshotFollowed says whether a snapshot of peer is applied: not one of
// this router, nor of a replica declared gone, nor of a router id that is
// not a live peer (counted as unannounced). apply held.
func (c *Core) snapshotFollowed(peer uint64) bool {
	if peer == c.self {
		return false
	}
	if _, gone := c.dead[peer]; gone {
		return false
	}
	if _, live := c.peers[peer]; !live {
		c.count(func(s *Stats) { s.Unannounced++ })
		return false
	}
	return true
}

// bookingSet is the bookings a peer should hold, by request id, with the
// ids in the order they were first booked.
type bookingSet struct {
	m     map[string]*booking
	order []string
}

// put applies one of the peer's lifecycle events to the set.
func (w *bookingSet) put(ev router.LifecycleEvent) {
	switch ev.Kind {
	case router.AddRequest:
		if _, ok := w.m[ev.RequestID]; !ok {
			w.order = append(w.order, ev.RequestID)
		}
		w.m[ev.RequestID] = &booking{add: ev}
	case router.MarkPrefillCompleted:
		if b := w.m[ev.RequestID]; b != nil {
			b.done = true
		}
	case router.Free:
		delete(w.m, ev.RequestID)
	}
}

// snapshotTarget is what the snapshot's router should be held to: the
// snapshot's own events, then those of log (its events received since
// BeginResync) that the snapshot does not cover. again says there is a
// hole among the latter.
func snapshotTarget(snap Snapshot, log []Event, sequenced bool) (want *bookingSet, again bool) {
	want = &bookingSet{m: map[string]*booking{}}
	for _, ev := range snap.Events {
		if ev.RouterID == snap.RouterID {
			want.put(ev)
		}
	}
	next := snap.Seq + 1
	for _, ev := range log {
		if sequenced && ev.Seq != 0 {
			if ev.Epoch != snap.Epoch || ev.Seq < next {
				continue // an older incarnation's, or covered by the snapshot
			}
			if ev.Seq > next {
				again = true
			}
			next = ev.Seq + 1
		}
		want.put(ev.LifecycleEvent)
	}
	return want, again
}

// freeUnwanted frees, in id order, the bookings held for peer that want
// lacks (their Free was lost), after forgetting those this router dropped
// by itself. It returns how many the router freed. apply held.
func (c *Core) freeUnwanted(peer uint64, want *bookingSet) (freed int) {
	held := c.remote[peer]
	ids := make([]string, 0, len(held))
	for id := range held {
		if !c.r.Booked(id) {
			// Dropped by this router without an event (worker removed,
			// booking expired): not held any more, re-added if wanted.
			delete(held, id)
			continue
		}
		if _, ok := want.m[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		if c.r.ApplyRemote(router.LifecycleEvent{Kind: router.Free, RouterID: peer, RequestID: id}) {
			freed++
		}
		delete(held, id)
	}
	if len(held) == 0 {
		delete(c.remote, peer)
	}
	return freed
}

// addWanted books, in want's order, the bookings not held for peer, and
// marks the prefill completed of those past it. It returns how many it
// booked. apply held.
func (c *Core) addWanted(peer uint64, want *bookingSet) int {
	before := c.snapshotApplied()
	for _, id := range want.order {
		b := want.m[id]
		if b == nil {
			continue
		}
		done, ok := c.remote[peer][id]
		if !ok {
			c.applyEvent(b.add, true)
		}
		if b.done && !done {
			c.applyEvent(router.LifecycleEvent{Kind: router.MarkPrefillCompleted, RouterID: peer, RequestID: id, Model: b.add.Model, Worker: b.add.Worker}, true)
		}
	}
	return int(c.snapshotApplied() - before)
}

func (c *Core) snapshotApplied() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats.SnapshotApplied
}

// Claim records that peer says it has reached stream position (epoch,
// seq) at now (snapshot requests carry the requester's position); claims
// of a router id that is not a live peer are ignored. A peer
// whose latest events were all lost reveals no hole to Receive; its claim
// does. See Lagging.
func (c *Core) Claim(peer, epoch, seq uint64, now time.Time) {
	if peer == c.self || seq == 0 {
		return
	}
	c.apply.Lock()
	defer c.apply.Unlock()
	if _, gone := c.dead[peer]; gone {
		return
	}
	if _, live := c.peers[peer]; !live {
		c.count(func(s *Stats) { s.Unannounced++ })
		return
	}
	st := c.stream(peer)
	if !st.behind(epoch, seq) {
		return
	}
	if st.claimAt == (time.Time{}) {
		st.claimAt = now
	}
	if epoch > st.claimEpoch || epoch == st.claimEpoch && seq > st.claim {
		st.claimEpoch, st.claim = epoch, seq
	}
}

// Lagging returns, sorted, the peers whose claimed position has been
// ahead of what this router received for at least grace (events in
// flight when the claim was made have arrived by then), and forgets
// those claims: their snapshots should be fetched.
func (c *Core) Lagging(now time.Time, grace time.Duration) []uint64 {
	c.apply.Lock()
	defer c.apply.Unlock()
	var out []uint64
	for p, st := range c.streams {
		if st.claimAt == (time.Time{}) || st.log != nil || now.Sub(st.claimAt) < grace {
			continue
		}
		st.claimAt = time.Time{}
		if st.behind(st.claimEpoch, st.claim) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Stats returns the core's counters.
func (c *Core) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
