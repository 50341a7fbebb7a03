package registry

import (
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// view is what a Watcher has told its reader about a bucket: each live
// key's revision and the time it expires without a heartbeat. It is the
// watcher's pure core (no I/O, no clock: time comes in as an argument),
// and it is what makes a watcher converge on the bucket's contents after
// an outage: a snapshot (every key's last entry, as a fresh watch
// delivers them) is compared with the view, and every key the reader
// believes live but the snapshot lacks is reported gone.
type view struct {
	ttl time.Duration
	// live holds the keys reported put and not yet gone.
	live map[string]liveKey
	// dead holds, per key, the last revision reported gone (deleted,
	// expired here, undecodable), so that a snapshot taken before the
	// server expired a record does not bring it back.
	dead map[string]uint64

	// The snapshot in progress, if any.
	snapping bool
	// seen holds the keys whose current entry the snapshot delivered as a
	// put: true when the key is live, false when it is gone here.
	seen map[string]bool
	// offline is how long the watcher has been cut off from NATS in all
	// (the time hold was told about).
	offline time.Duration
}

type liveKey struct {
	rev      uint64
	created  time.Time // server time of the last put
	deadline time.Time // local time it expires without a heartbeat
	// offlineAt is view.offline when the put was observed: the offline
	// time since is the part of the key's silence the watcher could not
	// hear.
	offlineAt time.Duration
}

// entryOp is what an entry did to its key.
type entryOp uint8

const (
	opPut entryOp = iota + 1
	opDelete
	opPurge // a purge, including the server's expiry (MaxAge) marker
)

// entry is one bucket entry as the view needs it.
type entry struct {
	key     string
	rev     uint64
	op      entryOp
	created time.Time // server time of the entry
}

func newView(ttl time.Duration) *view {
	return &view{ttl: ttl, live: map[string]liveKey{}, dead: map[string]uint64{}}
}

// begin starts a snapshot: the entries that follow until end are every
// key's last entry, then live changes may follow. A snapshot begun while
// another is in progress replaces it.
func (v *view) begin() {
	v.snapping = true
	v.seen = map[string]bool{}
}

// snapshotting reports whether a snapshot is in progress.
func (v *view) snapshotting() bool { return v.snapping }

// observe folds entry e, received at now, into the view and returns the
// change to report: Put, Deleted or Expired, or 0 when the reader knows it
// already (a heartbeat of a revision it saw, a stale or duplicate entry, a
// removal of a key it never saw). lapsed is set with a Put of a live key
// that expired in between: it was put more than the TTL after the put the
// reader saw last (server times on both sides), so the server expired the
// record meanwhile. That is how an expiry missed whole (the watcher blind
// while the record expired and its owner registered again) still reaches
// the reader. outage is set with lapsed when the silence was mostly this
// watcher's own outage: the part of it the watcher could have heard (its
// connected time) is shorter than the TTL, so the lapse may be nobody's
// fault but NATS's (the owner heartbeat into the void).
//
// A purge (the server's expiry marker) of a live key whose deadline has
// not passed here, and which the watcher has been cut off from since its
// last put, is held back until the deadline: after an outage the
// deadlines are held a TTL ahead, and the owner's re-put, coming right
// after its own reconnect, then reaches the reader as a lapsed Put rather
// than as an expiry and a new worker. If no put comes, expire reports
// the key at its deadline.
func (v *view) observe(e entry, now time.Time) (kind fleet.ChangeKind, lapsed, outage bool) {
	cur, isLive := v.live[e.key]
	if e.op == opPurge && isLive && e.rev > cur.rev && now.Before(cur.deadline) && cur.offlineAt < v.offline {
		if v.snapping {
			v.seen[e.key] = true
		}
		return 0, false, false
	}
	if e.op != opPut {
		if v.snapping {
			delete(v.seen, e.key)
		}
		if !isLive || e.rev <= cur.rev {
			if e.rev > v.dead[e.key] {
				v.dead[e.key] = e.rev
			}
			return 0, false, false
		}
		delete(v.live, e.key)
		v.dead[e.key] = e.rev
		if e.op == opDelete {
			return fleet.Deleted, false, false
		}
		return fleet.Expired, false, false
	}
	if (isLive && e.rev <= cur.rev) || (!isLive && e.rev <= v.dead[e.key]) {
		// Already reported (a snapshot re-delivering what the reader
		// knows), or already gone here (expired before the server said
		// so): the key is present but its liveness does not change.
		if v.snapping {
			v.seen[e.key] = isLive
		}
		return 0, false, false
	}
	start := now
	if v.snapping && e.created.Before(now) {
		// A value delivered by a snapshot may have aged since it was put
		// (server time; skew clamped to now). Live ones count from now.
		start = e.created
	}
	silence := e.created.Sub(cur.created)
	lapsed = isLive && silence > v.ttl
	outage = lapsed && silence-(v.offline-cur.offlineAt) < v.ttl
	v.live[e.key] = liveKey{rev: e.rev, created: e.created, deadline: start.Add(v.ttl), offlineAt: v.offline}
	if v.snapping {
		v.seen[e.key] = true
	}
	return fleet.Put, lapsed, outage
}

// gone is a key the reader must be told about: Deleted or Expired.
type gone struct {
	key  string
	kind fleet.ChangeKind
}

// end closes the snapshot at now and returns the live keys it lacked:
// they left the bucket while the watch was not looking. A key whose
// deadline has passed is reported Expired; one that vanished before its
// TTL ran out was deleted (or purged) by someone: Deleted, unless the
// watcher has been cut off since the key's last put: then it stays live
// until its (held) deadline, when expire reports it, or a put brings it
// back as a lapse.
func (v *view) end(now time.Time) []gone {
	if !v.snapping {
		return nil
	}
	var out []gone
	for k, lk := range v.live {
		if v.seen[k] {
			continue
		}
		if lk.offlineAt < v.offline && now.Before(lk.deadline) {
			// Gone without a marker since the watcher was cut off (a
			// server that expired it without one, or lost its store):
			// an expiry, held back until the held deadline like the
			// server's marker (see observe).
			continue
		}
		delete(v.live, k)
		v.dead[k] = lk.rev
		kind := fleet.Deleted
		if !now.Before(lk.deadline) {
			kind = fleet.Expired
		}
		out = append(out, gone{key: k, kind: kind})
	}
	// Forget the dead revisions of keys the bucket no longer holds (the
	// map would otherwise grow with every worker that ever came and
	// went); a key whose current entry is a dead revision stays.
	for k := range v.dead {
		if _, ok := v.live[k]; !ok && !v.present(k) {
			delete(v.dead, k)
		}
	}
	v.snapping, v.seen = false, nil
	return out
}

// present reports whether the snapshot in progress delivered k's current
// entry as a put (possibly one already gone here).
func (v *view) present(k string) bool { _, ok := v.seen[k]; return ok }

// expire returns, at now, the live keys whose deadline has passed (their
// heartbeats stopped for longer than the TTL), and forgets them.
func (v *view) expire(now time.Time) []string {
	var out []string
	for k, lk := range v.live {
		if now.After(lk.deadline) {
			delete(v.live, k)
			v.dead[k] = lk.rev
			out = append(out, k)
		}
	}
	return out
}

// hold keeps every live key's deadline at least a TTL after now: while
// the watcher cannot reach the bucket it sees no heartbeats, and a
// silence it cannot hear is not a record that expired. After the
// outage the snapshot reports what really left. away is how long the
// watcher has been cut off since the previous call (or since it was
// last connected).
func (v *view) hold(now time.Time, away time.Duration) {
	v.offline += max(away, 0)
	for k, lk := range v.live {
		if d := now.Add(v.ttl); lk.deadline.Before(d) {
			lk.deadline = d
			v.live[k] = lk
		}
	}
}

// forget drops key (its entry at rev could not be decoded): it is not
// live, and rev is not reported again.
func (v *view) forget(key string, rev uint64) {
	delete(v.live, key)
	if rev > v.dead[key] {
		v.dead[key] = rev
	}
	if v.snapping {
		v.seen[key] = false
	}
}
