package registry

import (
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// A worked example: a watch interrupted while one record was deleted, one
// expired, one was added and one kept heartbeating.
func TestViewSnapshotAfterOutage(t *testing.T) {
	ttl := 10 * time.Second
	t0 := time.Unix(1000, 0)
	v := newView(ttl)
	v.begin()
	for i, k := range []string{"del", "exp", "stay"} {
		if got := kind(t, v, entry{key: k, rev: uint64(i + 1), op: opPut, created: t0}, t0); got != fleet.Put {
			t.Fatalf("initial %s: %v", k, got)
		}
	}
	if g := v.end(t0); len(g) != 0 {
		t.Fatalf("first snapshot end: %v", g)
	}
	// Live: stay heartbeats (rev 4); then the connection drops. Meanwhile
	// del is deleted (rev 5), exp's heartbeats stop, new is put (rev 6),
	// stay heartbeats (rev 7), and the delete marker of del and the
	// expiry marker of exp age out of the bucket.
	if got := kind(t, v, entry{key: "stay", rev: 4, op: opPut, created: t0.Add(time.Second)}, t0.Add(time.Second)); got != fleet.Put {
		t.Fatalf("heartbeat: %v", got)
	}
	// Reconnected at t0+5s, before exp's TTL ran out here: a new snapshot.
	now := t0.Add(5 * time.Second)
	v.begin()
	if got := kind(t, v, entry{key: "new", rev: 6, op: opPut, created: t0.Add(2 * time.Second)}, now); got != fleet.Put {
		t.Fatalf("missed put: %v", got)
	}
	if got := kind(t, v, entry{key: "stay", rev: 7, op: opPut, created: t0.Add(4 * time.Second)}, now); got != fleet.Put {
		t.Fatalf("missed heartbeat: %v", got)
	}
	g := v.end(now)
	slices.SortFunc(g, func(a, b gone) int { return cmpString(a.key, b.key) })
	// Both vanished before their TTL ran out here: as far as the watcher
	// can tell, deleted.
	if want := []gone{{"del", fleet.Deleted}, {"exp", fleet.Deleted}}; !slices.Equal(g, want) {
		t.Fatalf("gone = %v, want %v", g, want)
	}
	// new's deadline counts from its creation (t0+2s), not from now.
	if got := v.expire(t0.Add(12*time.Second + time.Millisecond)); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("expire: %v", got)
	}
	// A snapshot taken before the server expired new does not bring it
	// back; stay's unchanged revision is not reported again.
	v.begin()
	if got := kind(t, v, entry{key: "new", rev: 6, op: opPut, created: t0.Add(2 * time.Second)}, t0.Add(13*time.Second)); got != 0 {
		t.Fatalf("expired record resurrected: %v", got)
	}
	if got := kind(t, v, entry{key: "stay", rev: 7, op: opPut, created: t0.Add(4 * time.Second)}, t0.Add(13*time.Second)); got != 0 {
		t.Fatalf("known revision reported again: %v", got)
	}
	if g := v.end(t0.Add(13 * time.Second)); len(g) != 0 {
		t.Fatalf("gone: %v", g)
	}
	// The server's expiry marker for new, then stay's heartbeats stop.
	if got := kind(t, v, entry{key: "new", rev: 8, op: opPurge}, t0.Add(13*time.Second)); got != 0 {
		t.Fatalf("marker of a key already expired here: %v", got)
	}
	// A snapshot long after stay's last heartbeat, before the local tick.
	v.begin()
	if g := v.end(t0.Add(30 * time.Second)); !slices.Equal(g, []gone{{"stay", fleet.Expired}}) {
		t.Fatalf("gone after the TTL: %v", g)
	}
	if len(v.live) != 0 || len(v.dead) != 0 {
		t.Fatalf("state left: live %v dead %v", v.live, v.dead)
	}
}

// kind observes e and returns the change, failing on a lapse.
func kind(t *testing.T, v *view, e entry, now time.Time) fleet.ChangeKind {
	t.Helper()
	k, lapsed, _ := v.observe(e, now)
	if lapsed {
		t.Fatalf("%+v: unexpected lapse", e)
	}
	return k
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Live changes: duplicates and stale entries are not reported, removals of
// unknown keys neither.
func TestViewLive(t *testing.T) {
	t0 := time.Unix(0, 0)
	v := newView(time.Second)
	v.begin()
	v.end(t0)
	steps := []struct {
		e    entry
		want fleet.ChangeKind
	}{
		{entry{key: "a", rev: 1, op: opPut}, fleet.Put},
		{entry{key: "a", rev: 1, op: opPut}, 0}, // redelivered
		{entry{key: "a", rev: 2, op: opPut}, fleet.Put},
		{entry{key: "b", rev: 3, op: opDelete}, 0}, // never seen
		{entry{key: "a", rev: 4, op: opDelete}, fleet.Deleted},
		{entry{key: "a", rev: 2, op: opPut}, 0}, // older than the deletion
		{entry{key: "a", rev: 5, op: opPut}, fleet.Put},
		{entry{key: "a", rev: 6, op: opPurge}, fleet.Expired},
	}
	for i, s := range steps {
		if got := kind(t, v, s.e, t0); got != s.want {
			t.Fatalf("step %d %+v: %v, want %v", i, s.e, got, s.want)
		}
	}
}

// TestViewHold: a key whose deadline passes while the watcher is held
// (disconnected) does not expire; it expires a TTL after the last hold if
// no heartbeat comes, and a heartbeat after the hold keeps it as usual.
func TestViewHold(t *testing.T) {
	t0 := time.Unix(0, 0)
	ttl := time.Second
	v := newView(ttl)
	v.begin()
	v.end(t0)
	kind(t, v, entry{key: "a", rev: 1, op: opPut, created: t0}, t0) // deadline t0+1s
	kind(t, v, entry{key: "b", rev: 2, op: opPut, created: t0}, t0)
	for ms := 250; ms <= 3000; ms += 250 { // 3 s disconnected
		v.hold(t0.Add(time.Duration(ms)*time.Millisecond), 250*time.Millisecond)
	}
	if got := v.expire(t0.Add(3500 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("expired %v half a TTL after the hold ended, want nothing", got)
	}
	// b's heartbeat put half a TTL after the last one (server time),
	// delivered late: live again, no lapse.
	kind(t, v, entry{key: "b", rev: 3, op: opPut, created: t0.Add(500 * time.Millisecond)}, t0.Add(3600*time.Millisecond))
	got := v.expire(t0.Add(4001 * time.Millisecond))
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("expired %v a TTL after the hold ended, want [a] (b had a heartbeat)", got)
	}
}

// TestViewConverges checks the view against a model: a bucket of
// revisions whose records expire a TTL after their last put (server
// time), watched by a reader that misses everything while blind. After
// every snapshot the reader's live keys equal the bucket's; while nothing
// was missed they do after every step; every expiry of a key the reader
// holds reaches it before a later put of that key (even one it was blind
// to); no key is reported twice at one revision and no key the reader
// does not hold is removed.
func TestViewConverges(t *testing.T) {
	const ttl = 10 * time.Second
	rapid.Check(t, func(t *rapid.T) {
		keys := []string{"a", "b", "c", "d"}
		now := time.Unix(1000, 0)
		v := newView(ttl)
		type rec struct {
			rev     uint64
			created time.Time
		}
		bucket := map[string]rec{}     // live records
		markers := map[string]uint64{} // removed key -> marker revision
		expiries := map[string]int{}   // key -> server expiries so far
		atRev := map[uint64]int{}      // revision of a put -> expiries of its key then
		reader := map[string]uint64{}  // what the reader holds: key -> revision
		readerEp := map[string]int{}   // expiries of the key when the reader learned it
		var rev uint64
		apply := func(k string, kind fleet.ChangeKind, lapsed bool, r uint64) {
			if lapsed {
				if kind != fleet.Put {
					t.Fatalf("lapse with %v", kind)
				}
				if _, ok := reader[k]; !ok {
					t.Fatalf("%s: lapse reported for a key the reader does not hold", k)
				}
				delete(reader, k)
			}
			switch kind {
			case fleet.Put:
				if old, ok := reader[k]; ok {
					if old >= r {
						t.Fatalf("%s reported again at revision %d (reader has %d)", k, r, old)
					}
					if readerEp[k] != atRev[r] {
						t.Fatalf("%s expired meanwhile but the reader was not told", k)
					}
				}
				reader[k], readerEp[k] = r, atRev[r]
			case fleet.Deleted, fleet.Expired:
				if _, ok := reader[k]; !ok {
					t.Fatalf("%s removed but the reader does not hold it", k)
				}
				delete(reader, k)
			case 0:
			default:
				t.Fatalf("kind %v", kind)
			}
		}
		holds := func() map[string]uint64 {
			m := map[string]uint64{}
			for k, r := range bucket {
				m[k] = r.rev
			}
			return m
		}
		snapshot := func() {
			v.begin()
			ks := slices.Sorted(maps.Keys(bucket))
			ks = append(ks, slices.Sorted(maps.Keys(markers))...)
			for _, k := range rapid.Permutation(ks).Draw(t, "order") {
				if r, ok := bucket[k]; ok {
					kd, l, _ := v.observe(entry{key: k, rev: r.rev, op: opPut, created: r.created}, now)
					apply(k, kd, l, r.rev)
				} else if rapid.Bool().Draw(t, "marker kept") {
					kd, l, _ := v.observe(entry{key: k, rev: markers[k], op: opDelete}, now)
					apply(k, kd, l, markers[k])
				}
			}
			for _, g := range v.end(now) {
				apply(g.key, g.kind, false, 0)
			}
			if h := holds(); !maps.Equal(reader, h) {
				t.Fatalf("after a snapshot the reader holds %v, the bucket %v", reader, h)
			}
		}
		blind, diverged := false, false
		remove := func(k string, op entryOp) {
			rev++
			delete(bucket, k)
			markers[k] = rev
			if !blind {
				kd, l, _ := v.observe(entry{key: k, rev: rev, op: op}, now)
				apply(k, kd, l, rev)
			}
		}
		snapshot()
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 6000).Draw(t, "ms")) * time.Millisecond)
			// The server expires records, then (when its tick comes) the
			// watcher itself.
			for _, k := range slices.Sorted(maps.Keys(bucket)) {
				if now.Sub(bucket[k].created) > ttl {
					expiries[k]++
					remove(k, opPurge)
				}
			}
			if rapid.Bool().Draw(t, "tick") { // the watcher's ticks may lag
				for _, k := range v.expire(now) {
					apply(k, fleet.Expired, false, 0)
				}
			}
			k := rapid.SampledFrom(keys).Draw(t, "key")
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1: // put (a heartbeat or a registration)
				rev++
				bucket[k] = rec{rev: rev, created: now}
				atRev[rev] = expiries[k]
				delete(markers, k)
				if !blind {
					kd, l, _ := v.observe(entry{key: k, rev: rev, op: opPut, created: now}, now)
					apply(k, kd, l, rev)
				}
			case 2: // deletion
				if _, ok := bucket[k]; ok {
					remove(k, opDelete)
				}
			case 3: // the connection drops or comes back
				blind = !blind
			case 4: // a reconnect or a periodic resync
				blind = false
				snapshot()
				diverged = false
			}
			diverged = diverged || blind
			if h := holds(); !diverged && !maps.Equal(reader, h) {
				t.Fatalf("with nothing missed the reader holds %v, the bucket %v", reader, h)
			}
		}
		blind = false
		snapshot()
	})
}

// TestViewOutageLapse: a record whose heartbeats could not be heard
// because the watcher itself was cut off (its connected share of the
// silence shorter than the TTL) comes back as a lapsed Put flagged as the
// outage's; the server's expiry marker delivered first (the snapshot
// after the reconnect) is held back until the held deadline, so the
// re-put still reaches the reader as that one Put. A silence the watcher
// could hear is a lapse, not the outage's.
func TestViewOutageLapse(t *testing.T) {
	t0 := time.Unix(0, 0)
	ttl := time.Second
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	v := newView(ttl)
	v.begin()
	v.end(t0)
	kind(t, v, entry{key: "a", rev: 1, op: opPut, created: t0}, t0)
	kind(t, v, entry{key: "b", rev: 2, op: opPut, created: t0}, t0)
	kind(t, v, entry{key: "c", rev: 3, op: opPut, created: t0}, t0)
	for ms := 250; ms <= 3000; ms += 250 { // 3 s cut off
		v.hold(at(ms), 250*time.Millisecond)
	}
	// The snapshot after the reconnect: the server's markers (none for c,
	// gone without a trace), and a's re-put.
	v.begin()
	if k, _, _ := v.observe(entry{key: "a", rev: 3, op: opPurge, created: at(1000)}, at(3100)); k != 0 {
		t.Fatalf("a's marker reported at once: %v", k)
	}
	if k, _, _ := v.observe(entry{key: "b", rev: 4, op: opPurge, created: at(1000)}, at(3100)); k != 0 {
		t.Fatalf("b's marker reported at once: %v", k)
	}
	if g := v.end(at(3100)); len(g) != 0 {
		t.Fatalf("gone at the end of the snapshot: %v", g)
	}
	k, lapsed, outage := v.observe(entry{key: "a", rev: 5, op: opPut, created: at(3150)}, at(3200))
	if k != fleet.Put || !lapsed || !outage {
		t.Fatalf("a's re-put: %v lapsed %v outage %v; want put, lapsed, outage", k, lapsed, outage)
	}
	// b never comes back: it expires at its held deadline.
	if got := v.expire(at(3900)); len(got) != 0 {
		t.Fatalf("expired before the held deadline: %v", got)
	}
	got := v.expire(at(4100))
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("expired %v after the held deadline, want [b c]", got)
	}
	// Connected all along: a put 2 TTLs after the last is a lapse the
	// watcher could have heard.
	k, lapsed, outage = v.observe(entry{key: "a", rev: 6, op: opPut, created: at(5200)}, at(5200))
	if k != fleet.Put || !lapsed || outage {
		t.Fatalf("a after a heard silence: %v lapsed %v outage %v; want put, lapsed, not the outage's", k, lapsed, outage)
	}
	// A marker past the local deadline is reported at once.
	if k, _, _ := v.observe(entry{key: "a", rev: 7, op: opPurge}, at(6300)); k != fleet.Expired {
		t.Fatalf("marker past the deadline: %v", k)
	}
}
