package fleet

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// Origin says where a worker came from.
type Origin uint8

// Origins.
const (
	// OriginStatic: the static list (config file or --worker).
	OriginStatic Origin = iota + 1
	// OriginRegistry: the NATS KV registry.
	OriginRegistry
)

// String names the origin: "static" or "registry".
func (o Origin) String() string {
	switch o {
	case OriginStatic:
		return "static"
	case OriginRegistry:
		return "registry"
	}
	return fmt.Sprintf("Origin(%d)", uint8(o))
}

// Worker is a worker as the directory knows it.
type Worker struct {
	// Record is what the worker declared.
	Record WorkerRecord
	// Origin is where the record came from.
	Origin Origin
	// Status is its current state with reason and since-time.
	Status Status
}

// NoteKind says how the set of routable workers changed.
type NoteKind uint8

// Notification kinds.
const (
	// Added: a worker joined (subscribe to its events, recover its index).
	Added NoteKind = iota + 1
	// Updated: a worker's record changed (its URL, capacity...).
	Updated
	// Removed: a worker left, expired or was refused (remove its blocks).
	Removed
)

// String names the kind.
func (k NoteKind) String() string {
	switch k {
	case Added:
		return "added"
	case Updated:
		return "updated"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("NoteKind(%d)", uint8(k))
}

// Notification tells the router how the worker set changed.
type Notification struct {
	// Kind says what happened.
	Kind NoteKind
	// Worker is the worker after the change (for Removed, its last record
	// with the reason in Status).
	Worker Worker
}

// Logger is what a Directory reports through: *slog.Logger satisfies it.
// The fleet model does no I/O itself (a test in package purity checks
// it); the caller's logger does, and importing log/slog here would pull
// package os in.
type Logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

// discard is the Logger of a Directory given none.
type discard struct{}

func (discard) Info(string, ...any) {}
func (discard) Warn(string, ...any) {}

// Directory merges the static list with the registry, checks every worker
// against the router's expectations and keeps each worker's status. It is
// safe for concurrent use.
type Directory struct {
	expect Expect
	log    Logger

	mu      sync.Mutex
	workers map[kvevent.WorkerID]*Worker // accepted and refused workers
	byKey   map[string]kvevent.WorkerID  // registry key -> id it holds
	keyOf   map[kvevent.WorkerID]string  // the inverse of byKey (one key per id: see put)
	// names maps the name of every registry worker the directory holds
	// (accepted or refused) to its key: names are unique among known
	// workers, so that every per-worker view (metrics labelled by name,
	// /v1/workers) has one row per name.
	names  map[string]string
	static map[string]kvevent.WorkerID // static names
	// conflicted holds registry keys already reported as conflicting, so
	// that heartbeats do not repeat the warning.
	conflicted map[string]bool
	// leases holds, per registry key with an instance id, which process
	// owns it (see keyLease).
	leases map[string]*keyLease
	// What was refused or ignored (DirectoryStats).
	refused    map[string]uint64
	conflicts  uint64
	invalid    uint64
	urlChanges uint64
	takeovers  uint64
}

// keyLease is what the directory knows of the processes writing one
// registry key: the accepted instance and its last put, and a rival
// instance seen writing the key while the accepted one was alive.
type keyLease struct {
	instance  string
	last      time.Time
	rival     string
	rivalLast time.Time
	flagged   bool // the rival was reported as a takeover
}

// DirectoryStats is what a Directory has counted, for the metrics the
// composition root exports at scrape time.
type DirectoryStats struct {
	// Refused counts workers refused because they break the router's
	// contract, by reason: "block_size", "hash_contract" or "contract".
	// Reasons never seen are absent.
	Refused map[string]uint64
	// Conflicts counts registry records ignored because a static worker
	// or another record has the same id or name (once per record, not per
	// heartbeat).
	Conflicts uint64
	// Conflicting is how many registry records are being ignored for such
	// a conflict now.
	Conflicting int
	// Invalid counts registry records that could not be decoded or failed
	// validation.
	Invalid uint64
	// URLChanges counts changes of a known worker's URL (each logged).
	URLChanges uint64
	// Takeovers counts registry keys written by a second live process (a
	// record with another instance id while the accepted instance still
	// heartbeats); its puts are ignored, the first process keeps the key.
	Takeovers uint64
	// Workers counts the known workers by state (index: State).
	Workers [StateRefused + 1]int
}

// NewDirectory builds a directory holding the static workers and returns
// an Added notification for each accepted one. Static workers that fail
// expect are refused loudly like registered ones. log may be nil.
func NewDirectory(expect Expect, static []WorkerRecord, log Logger, now time.Time) (*Directory, []Notification, error) {
	if log == nil {
		log = discard{}
	}
	d := &Directory{
		expect:  expect,
		log:     log,
		workers: map[kvevent.WorkerID]*Worker{},
		byKey:   map[string]kvevent.WorkerID{},
		keyOf:   map[kvevent.WorkerID]string{},
		names:   map[string]string{},
		leases:  map[string]*keyLease{},
		static:  map[string]kvevent.WorkerID{},

		conflicted: map[string]bool{},
		refused:    map[string]uint64{},
	}
	var notes []Notification
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rec := range static {
		if err := rec.Validate(); err != nil {
			return nil, nil, err
		}
		if _, dup := d.workers[rec.ID]; dup {
			return nil, nil, fmt.Errorf("static worker %q: duplicate id %d", rec.Name, rec.ID)
		}
		d.static[rec.Name] = rec.ID
		w := &Worker{Record: rec, Origin: OriginStatic}
		d.workers[rec.ID] = w
		if err := d.expect.Check(rec); err != nil {
			d.refuse(w, err, now)
			continue
		}
		st, why := rec.InitialStatus()
		w.Status = w.Status.To(st, why, now)
		notes = append(notes, Notification{Kind: Added, Worker: *w})
	}
	return d, notes, nil
}

// refuse marks w refused with err's text as the reason, loudly.
func (d *Directory) refuse(w *Worker, err error, now time.Time) {
	reason := "contract"
	switch {
	case errors.Is(err, ErrBlockSizeMismatch):
		reason = "block_size"
	case errors.Is(err, ErrHashContractMismatch):
		reason = "hash_contract"
	}
	d.refused[reason]++
	w.Status = w.Status.To(StateRefused, err.Error(), now)
	d.log.Warn("worker REFUSED: it would make routing silently wrong",
		"worker", w.Record.Name, "worker_id", uint64(w.Record.ID), "origin", w.Origin.String(),
		"url", w.Record.URL, "reason", err.Error())
}

// Apply folds one registry change into the directory and returns the
// notifications it causes (none, one, or Removed then Added).
func (d *Directory) Apply(c Change[WorkerRecord], now time.Time) []Notification {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch c.Kind {
	case Put:
		var notes []Notification
		if c.Lapsed {
			notes = d.lapsed(c.Key, c.Value, now)
		}
		return append(notes, d.put(c.Key, c.Value, now)...)
	case Deleted:
		delete(d.conflicted, c.Key)
		return d.remove(c.Key, "deregistered", now)
	case Expired:
		delete(d.conflicted, c.Key)
		return d.remove(c.Key, "registration expired (no heartbeat)", now)
	case Invalid:
		delete(d.conflicted, c.Key)
		d.invalid++
		d.log.Warn("ignoring undecodable registry record", "key", c.Key, "err", c.Err)
		return d.remove(c.Key, "registry record became invalid", now)
	}
	return nil
}

func (d *Directory) put(key string, rec WorkerRecord, now time.Time) []Notification {
	if err := rec.Validate(); err != nil {
		delete(d.conflicted, key)
		d.invalid++
		d.log.Warn("ignoring invalid registry record", "key", key, "err", err)
		return d.remove(key, "registry record became invalid", now)
	}
	if sid, ok := d.static[rec.Name]; ok || d.isStatic(rec.ID) {
		if !ok {
			sid = rec.ID
		}
		if !d.conflicted[key] {
			d.conflicted[key] = true
			d.conflicts++
			d.log.Warn("registry record conflicts with a static worker; static wins",
				"key", key, "name", rec.Name, "worker_id", uint64(rec.ID), "static_worker_id", uint64(sid))
		}
		return d.remove(key, "conflicts with a static worker", now)
	}
	if owner, ok := d.ownerKey(rec.ID); ok && owner != key {
		if !d.conflicted[key] {
			d.conflicted[key] = true
			d.conflicts++
			d.log.Warn("registry record reuses another record's worker id; ignored",
				"key", key, "other_key", owner, "worker_id", uint64(rec.ID))
		}
		return d.remove(key, "conflicts with another record", now)
	}
	if owner, ok := d.names[rec.Name]; ok && owner != key {
		// The first registered keeps the name: two workers of one name
		// would be one row in every view by name (and two samples of one
		// series in /metrics, which fails the whole scrape).
		if !d.conflicted[key] {
			d.conflicted[key] = true
			d.conflicts++
			d.log.Warn("registry record reuses another worker's name; ignored (the first registered keeps it)",
				"key", key, "name", rec.Name, "worker_id", uint64(rec.ID), "other_key", owner, "url", rec.URL)
		}
		return d.remove(key, "conflicts with another record's name", now)
	}
	delete(d.conflicted, key)
	var notes []Notification
	if oldID, ok := d.byKey[key]; ok && oldID != rec.ID {
		notes = append(notes, d.remove(key, "re-registered under another id", now)...)
	}
	if d.contested(key, rec, now) {
		return notes
	}
	d.byKey[key] = rec.ID
	d.keyOf[rec.ID] = key
	old, known := d.workers[rec.ID]
	if known && old.Record.Name != rec.Name && d.names[old.Record.Name] == key {
		delete(d.names, old.Record.Name)
	}
	d.names[rec.Name] = key
	w := &Worker{Record: rec, Origin: OriginRegistry}
	if known {
		w.Status = old.Status
	}
	d.workers[rec.ID] = w
	wasAccepted := known && old.Status.State != StateRefused
	if err := d.expect.Check(rec); err != nil {
		if known && old.Status.State == StateRefused && old.Status.Reason == err.Error() {
			return notes // the same refusal, heartbeat after heartbeat: say it once
		}
		d.refuse(w, err, now)
		if wasAccepted {
			notes = append(notes, Notification{Kind: Removed, Worker: *w})
		}
		return notes
	}
	if !wasAccepted {
		st, why := rec.InitialStatus()
		w.Status = w.Status.To(st, why, now)
		d.log.Info("worker added", "worker", rec.Name, "worker_id", uint64(rec.ID), "url", rec.URL, "events", string(rec.Events.Kind))
		return append(notes, Notification{Kind: Added, Worker: *w})
	}
	if recordsEqual(old.Record, rec) {
		return notes // a heartbeat
	}
	if old.Record.URL != rec.URL {
		d.urlChanges++
		d.log.Warn("worker URL changed: requests go to the new URL", "worker", rec.Name, "worker_id", uint64(rec.ID), "key", key,
			"old_url", old.Record.URL, "url", rec.URL, "old_instance", old.Record.Instance, "instance", rec.Instance, "registered_by", rec.RegisteredBy)
	}
	return append(notes, Notification{Kind: Updated, Worker: *w})
}

// contested applies the instance rules to a valid, non-conflicting put of
// rec under key (when both it and the record the key holds carry an
// instance id) and reports whether the put must be ignored: another
// process writes the key while the accepted one is still alive (its last
// put less than Expect.Takeover ago). Such a rival is reported as a
// takeover (logged once, counted) as soon as the accepted instance puts
// again; if the accepted instance falls silent instead, the rival's next
// put is a restart (the process was replaced) and is accepted.
func (d *Directory) contested(key string, rec WorkerRecord, now time.Time) bool {
	l := d.leases[key]
	if rec.Instance == "" {
		delete(d.leases, key)
		return false
	}
	old, known := d.workers[rec.ID]
	if l == nil || !known || d.byKey[key] != rec.ID || old.Record.Instance == "" {
		d.leases[key] = &keyLease{instance: rec.Instance, last: now}
		return false
	}
	window := d.expect.Takeover
	switch {
	case rec.Instance == l.instance:
		l.last = now
		if l.rival == "" {
			return false
		}
		if now.Sub(l.rivalLast) > window {
			l.rival, l.flagged = "", false // the rival stopped
			return false
		}
		if !l.flagged {
			l.flagged = true
			d.takeovers++
			d.log.Warn("two live processes register the same worker: the other one's records are ignored (a takeover, or two workers configured with one name)",
				"worker", rec.Name, "worker_id", uint64(rec.ID), "key", key, "instance", l.instance, "url", old.Record.URL,
				"other_instance", l.rival)
		}
		return false
	case window > 0 && now.Sub(l.last) <= window:
		if l.rival != rec.Instance {
			l.rival, l.flagged = rec.Instance, false
			d.log.Info("another process wrote a live worker's registration; ignored unless the first falls silent",
				"worker", rec.Name, "key", key, "instance", l.instance, "other_instance", rec.Instance, "other_url", rec.URL)
		}
		l.rivalLast = now
		return true
	}
	d.log.Info("worker restarted: a new process registered it", "worker", rec.Name, "worker_id", uint64(rec.ID),
		"old_instance", l.instance, "instance", rec.Instance)
	*l = keyLease{instance: rec.Instance, last: now}
	return false
}

// lapsed handles a Put whose key lapsed during this router's NATS outage,
// before the put itself: when the key's worker came back from the same
// instance it is kept (the put is then an ordinary one); otherwise it is
// removed, and the put adds it again.
func (d *Directory) lapsed(key string, rec WorkerRecord, now time.Time) []Notification {
	id, ok := d.byKey[key]
	if !ok {
		return nil
	}
	if w, ok := d.workers[id]; ok && id == rec.ID && w.Record.Instance != "" && w.Record.Instance == rec.Instance {
		d.log.Info("worker registration lapsed during a NATS outage and came back from the same process: worker kept",
			"worker", rec.Name, "worker_id", uint64(rec.ID), "instance", rec.Instance)
		return nil
	}
	return d.remove(key, "registration expired during a NATS outage", now)
}

func (d *Directory) isStatic(id kvevent.WorkerID) bool {
	w, ok := d.workers[id]
	return ok && w.Origin == OriginStatic
}

// ownerKey returns the registry key holding id. A map lookup, not a scan
// of byKey: it runs on every heartbeat, and a scan made a fleet of 1,024
// workers cost a million map steps per heartbeat round and made the
// first read of the registry quadratic.
func (d *Directory) ownerKey(id kvevent.WorkerID) (string, bool) {
	k, ok := d.keyOf[id]
	return k, ok
}

func (d *Directory) remove(key, reason string, now time.Time) []Notification {
	delete(d.leases, key)
	id, ok := d.byKey[key]
	if !ok {
		return nil
	}
	delete(d.byKey, key)
	if d.keyOf[id] == key {
		delete(d.keyOf, id)
	}
	w, ok := d.workers[id]
	if !ok || w.Origin != OriginRegistry {
		return nil
	}
	delete(d.workers, id)
	if d.names[w.Record.Name] == key {
		delete(d.names, w.Record.Name)
	}
	if w.Status.State == StateRefused {
		return nil // never announced
	}
	w.Status = w.Status.To(StateDown, reason, now)
	d.log.Info("worker removed", "worker", w.Record.Name, "worker_id", uint64(id), "reason", reason)
	return []Notification{{Kind: Removed, Worker: *w}}
}

func recordsEqual(a, b WorkerRecord) bool { return a == b }

// SetStatus moves a known, non-refused worker to state with reason (the
// router reports EXACT, DEGRADED, DOWN as events flow or stop). It reports
// whether the worker was found.
func (d *Directory) SetStatus(id kvevent.WorkerID, state State, reason string, now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.workers[id]
	if !ok || w.Status.State == StateRefused {
		return false
	}
	w.Status = w.Status.To(state, reason, now)
	return true
}

// Get returns the worker with id.
func (d *Directory) Get(id kvevent.WorkerID) (Worker, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.workers[id]
	if !ok {
		return Worker{}, false
	}
	return *w, true
}

// Workers returns every known worker, refused ones included, sorted by
// name.
func (d *Directory) Workers() []Worker {
	d.mu.Lock()
	out := make([]Worker, 0, len(d.workers))
	for _, w := range d.workers {
		out = append(out, *w)
	}
	d.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Record.Name < out[j].Record.Name })
	return out
}

// Stats returns what the directory has counted so far and how many known
// workers are in each state.
func (d *Directory) Stats() DirectoryStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := DirectoryStats{Refused: maps.Clone(d.refused), Conflicts: d.conflicts, Conflicting: len(d.conflicted), Invalid: d.invalid,
		URLChanges: d.urlChanges, Takeovers: d.takeovers}
	for _, w := range d.workers {
		if int(w.Status.State) < len(st.Workers) {
			st.Workers[w.Status.State]++
		}
	}
	return st
}
