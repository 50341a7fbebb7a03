package fleet

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// rec is a valid NATS-fed record of name with blockSize.
func rec(name string, blockSize int) WorkerRecord {
	return WorkerRecord{
		Name: name, URL: "http://127.0.0.1:9000", BlockSize: blockSize, DPSize: 1,
		Events: EventSource{Kind: EventsNATS}, Hash: DefaultHashContract(), RegisteredBy: "test",
	}
}

// recordKey stands for a registry key: any string per record will do.
func recordKey(id kvevent.WorkerID) string { return fmt.Sprintf("%d", uint64(id)) }

func kinds(ns []Notification) []NoteKind {
	out := []NoteKind{}
	for _, n := range ns {
		out = append(out, n.Kind)
	}
	return out
}

func sameKinds(a []NoteKind, b ...NoteKind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Apply without NATS: the directory's rules on a scripted change stream.
func TestDirectoryApply(t *testing.T) {
	d, initial, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, nil, time.Unix(0, 0))
	if err != nil || len(initial) != 0 {
		t.Fatal(initial, err)
	}
	t0 := time.Unix(1000, 0)
	a := rec("a", 16)
	a.ID = DeriveID("a")
	key := recordKey(a.ID)
	put := func(k string, r WorkerRecord, at time.Time) []NoteKind {
		return kinds(d.Apply(Change[WorkerRecord]{Kind: Put, Key: k, Value: r}, at))
	}

	if got := put(key, a, t0); !sameKinds(got, Added) {
		t.Fatalf("first put: %v", got)
	}
	if got := put(key, a, t0.Add(time.Second)); !sameKinds(got) {
		t.Fatalf("heartbeat: %v", got)
	}
	a2 := a
	a2.URL = "http://127.0.0.1:9001"
	if got := put(key, a2, t0.Add(2*time.Second)); !sameKinds(got, Updated) {
		t.Fatalf("update: %v", got)
	}
	w, _ := d.Get(a.ID)
	if w.Record.URL != a2.URL || w.Status.Since != t0 {
		t.Fatalf("after update: %+v", w)
	}
	// The router reports progress.
	if !d.SetStatus(a.ID, StateExact, "", t0.Add(3*time.Second)) {
		t.Fatal("SetStatus on a known worker")
	}
	if d.SetStatus(12345, StateExact, "", t0) {
		t.Fatal("SetStatus on an unknown worker")
	}
	// Another key claiming the same id is ignored.
	if got := put("other", a2, t0.Add(4*time.Second)); !sameKinds(got) {
		t.Fatalf("second key with the same id: %v", got)
	}
	if got := d.Stats().Conflicts; got != 1 {
		t.Errorf("conflicts = %v", got)
	}
	// Breaking the contract removes an accepted worker.
	a3 := a2
	a3.BlockSize = 8
	if got := put(key, a3, t0.Add(5*time.Second)); !sameKinds(got, Removed) {
		t.Fatalf("refused after accepted: %v", got)
	}
	w, _ = d.Get(a.ID)
	if w.Status.State != StateRefused || w.Status.Since != t0.Add(5*time.Second) {
		t.Fatalf("refused status: %+v", w.Status)
	}
	if d.SetStatus(a.ID, StateExact, "", t0) {
		t.Fatal("a refused worker's state changed")
	}
	// Its deletion is silent: it was already announced as removed.
	if got := kinds(d.Apply(Change[WorkerRecord]{Kind: Deleted, Key: key}, t0)); !sameKinds(got) {
		t.Fatalf("delete of a refused worker: %v", got)
	}
	// Undecodable and invalid records are counted and drop what the key held.
	b := rec("b", 16)
	b.ID = DeriveID("b")
	put(recordKey(b.ID), b, t0)
	got := kinds(d.Apply(Change[WorkerRecord]{Kind: Invalid, Key: recordKey(b.ID), Err: errors.New("bad json")}, t0))
	if !sameKinds(got, Removed) {
		t.Fatalf("invalid: %v", got)
	}
	bad := rec("", 16)
	if got := put("x", bad, t0); !sameKinds(got) {
		t.Fatalf("nameless record: %v", got)
	}
	if got := d.Stats().Invalid; got != 2 {
		t.Errorf("invalid = %v", got)
	}
	if len(d.Workers()) != 0 {
		t.Errorf("workers left: %+v", d.Workers())
	}
}

func TestNewDirectoryRejectsDuplicateStaticIDs(t *testing.T) {
	a := rec("a", 16)
	a.ID = 7
	b := rec("b", 16)
	b.ID = 7
	if _, _, err := NewDirectory(Expect{}, []WorkerRecord{a, b}, nil, time.Unix(0, 0)); err == nil {
		t.Fatal("duplicate static ids accepted")
	}
	if _, _, err := NewDirectory(Expect{}, []WorkerRecord{rec("", 16)}, nil, time.Unix(0, 0)); err == nil {
		t.Fatal("invalid static record accepted")
	}
}

// The directory against a naive model: after any sequence of registry
// changes, the announced workers (replaying its notifications) and its
// accepted registry workers are exactly the present records that have the
// router's block size and do not clash with the static worker.
func TestDirectoryMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		static, err := BuildStatic([]StaticWorker{{Name: "s", URL: "http://h:1"}}, 16, DefaultHashContract())
		if err != nil {
			t.Fatal(err)
		}
		d, initial, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, static, nil, time.Unix(0, 0))
		if err != nil || len(initial) != 1 {
			t.Fatal(initial, err)
		}
		names := []string{"a", "b", "c", "s"} // key i always holds names[i]
		present := map[string]WorkerRecord{}
		announced := map[kvevent.WorkerID]bool{}
		now := time.Unix(1, 0)
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			i := rapid.IntRange(0, len(names)-1).Draw(t, "key")
			key := "k" + names[i]
			var c Change[WorkerRecord]
			switch op := rapid.IntRange(0, 3).Draw(t, "op"); op {
			case 0, 1:
				r := rec(names[i], rapid.SampledFrom([]int{16, 32}).Draw(t, "bs"))
				r.ID = DeriveID(names[i])
				r.MaxBatchedTokens = uint64(rapid.IntRange(0, 2).Draw(t, "mbt"))
				c = Change[WorkerRecord]{Kind: Put, Key: key, Value: r}
				present[key] = r
			case 2:
				c = Change[WorkerRecord]{Kind: Deleted, Key: key}
				delete(present, key)
			case 3:
				c = Change[WorkerRecord]{Kind: Expired, Key: key}
				delete(present, key)
			}
			now = now.Add(time.Second)
			for _, n := range d.Apply(c, now) {
				id := n.Worker.Record.ID
				switch n.Kind {
				case Added:
					if announced[id] {
						t.Fatalf("step %d: %s added twice", step, n.Worker.Record.Name)
					}
					announced[id] = true
				case Updated:
					if !announced[id] {
						t.Fatalf("step %d: update of unannounced %s", step, n.Worker.Record.Name)
					}
				case Removed:
					if !announced[id] {
						t.Fatalf("step %d: removal of unannounced %s", step, n.Worker.Record.Name)
					}
					delete(announced, id)
				}
			}
			want := map[kvevent.WorkerID]bool{}
			for _, r := range present {
				if r.Name != "s" && r.BlockSize == 16 {
					want[r.ID] = true
				}
			}
			got := map[kvevent.WorkerID]bool{}
			for _, w := range d.Workers() {
				if w.Origin == OriginRegistry && w.Status.State.Routable() {
					got[w.Record.ID] = true
				}
				if w.Record.Name == "s" && w.Origin != OriginStatic {
					t.Fatalf("step %d: static worker replaced", step)
				}
			}
			if !maps.Equal(want, got) || !maps.Equal(want, announced) {
				t.Fatalf("step %d: want %v, directory %v, announced %v", step, want, got, announced)
			}
		}
	})
}

// Two records of one name under different keys (and ids): the first keeps
// the name, the second is ignored and counted once however often it
// heartbeats, and takes the name at its next heartbeat once the first
// has left. Names stay unique among known workers throughout.
func TestDirectoryNameConflict(t *testing.T) {
	d, _, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, nil, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	first, second := rec("dup", 16), rec("dup", 16)
	first.ID, second.ID = 101, 102
	second.URL = "http://127.0.0.1:9002"
	put := func(k string, r WorkerRecord) []NoteKind {
		return kinds(d.Apply(Change[WorkerRecord]{Kind: Put, Key: k, Value: r}, t0))
	}
	unique := func() {
		t.Helper()
		seen := map[string]bool{}
		for _, w := range d.Workers() {
			if seen[w.Record.Name] {
				t.Fatalf("two workers named %q: %+v", w.Record.Name, d.Workers())
			}
			seen[w.Record.Name] = true
		}
	}
	if got := put("k1", first); !sameKinds(got, Added) {
		t.Fatalf("first: %v", got)
	}
	for range 3 {
		if got := put("k2", second); !sameKinds(got) {
			t.Fatalf("second: %v", got)
		}
		if got := put("k1", first); !sameKinds(got) {
			t.Fatalf("first's heartbeat: %v", got)
		}
		unique()
	}
	if st := d.Stats(); st.Conflicts != 1 || st.Conflicting != 1 {
		t.Fatalf("conflicts %d, conflicting %d; want 1, 1", st.Conflicts, st.Conflicting)
	}
	if w, ok := d.Get(first.ID); !ok || w.Record.URL != first.URL {
		t.Fatalf("first lost the name: %+v", w)
	}
	// A third of that name is a conflict too (before its contract is checked).
	third := rec("dup", 32)
	third.ID = 103
	if got := put("k3", third); !sameKinds(got) {
		t.Fatalf("third: %v", got)
	}
	unique()
	// The first leaves: the second's next heartbeat takes the name.
	if got := kinds(d.Apply(Change[WorkerRecord]{Kind: Deleted, Key: "k1"}, t0)); !sameKinds(got, Removed) {
		t.Fatalf("first's deletion: %v", got)
	}
	if got := put("k2", second); !sameKinds(got, Added) {
		t.Fatalf("second after the first left: %v", got)
	}
	unique()
	if st := d.Stats(); st.Conflicts != 2 || st.Conflicting != 1 {
		t.Fatalf("conflicts %d, conflicting %d; want 2, 1 (the third)", st.Conflicts, st.Conflicting)
	}
	// A record renamed onto a taken name loses its own worker.
	other := rec("other", 16)
	other.ID = 104
	put("k4", other)
	other.Name = "dup"
	if got := put("k4", other); !sameKinds(got, Removed) {
		t.Fatalf("rename onto a taken name: %v", got)
	}
	unique()
}

// A known worker's URL change is counted (and logged); a heartbeat is not.
func TestDirectoryCountsURLChanges(t *testing.T) {
	d, _, _ := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, nil, time.Unix(0, 0))
	t0 := time.Unix(1000, 0)
	a := rec("a", 16)
	a.ID = 1
	d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: a}, t0)
	d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: a}, t0)
	a.KVCapacityBlocks = 7
	d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: a}, t0)
	if n := d.Stats().URLChanges; n != 0 {
		t.Fatalf("url changes %d before any", n)
	}
	a.URL = "http://127.0.0.1:9999"
	if got := kinds(d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: a}, t0)); !sameKinds(got, Updated) {
		t.Fatalf("url change: %v", got)
	}
	if n := d.Stats().URLChanges; n != 1 {
		t.Fatalf("url changes %d, want 1", n)
	}
}

// Instance ids tell a restart (the old process fell silent) from a
// takeover (a second live process writes the key): the takeover's puts
// are ignored and counted once, a restart is accepted.
func TestDirectoryRestartVersusTakeover(t *testing.T) {
	const beat = time.Second // the owner's heartbeat
	d, _, _ := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract(), Takeover: 3 * beat / 2}, nil, nil, time.Unix(0, 0))
	t0 := time.Unix(1000, 0)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * beat / 2) }
	a := rec("a", 16)
	a.ID, a.Instance = 1, "first"
	x := a
	x.Instance, x.URL = "intruder", "http://127.0.0.1:6666"
	put := func(r WorkerRecord, i int) []NoteKind {
		return kinds(d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: r}, at(i)))
	}
	url := func() string { w, _ := d.Get(1); return w.Record.URL }
	if got := put(a, 0); !sameKinds(got, Added) {
		t.Fatalf("first: %v", got)
	}
	// Both heartbeat, interleaved, for a while: the first keeps the key.
	for i := 1; i < 12; i += 2 {
		if got := put(x, i); !sameKinds(got) {
			t.Fatalf("intruder at %d: %v", i, got)
		}
		if got := put(a, i+1); !sameKinds(got) {
			t.Fatalf("first at %d: %v", i+1, got)
		}
		if url() != a.URL {
			t.Fatalf("the intruder's URL was taken at %d", i)
		}
	}
	if st := d.Stats(); st.Takeovers != 1 || st.URLChanges != 0 {
		t.Fatalf("takeovers %d, url changes %d; want 1, 0", st.Takeovers, st.URLChanges)
	}
	// The first process dies; the other one's puts are a restart once it
	// has been silent for longer than the window.
	if got := put(x, 13); !sameKinds(got) {
		t.Fatalf("at 13 the first was heard 1 beat ago: %v", got)
	}
	if got := put(x, 15); !sameKinds(got) {
		t.Fatalf("at 15 the first was heard 1.5 beats ago (the window): %v", got)
	}
	if got := put(x, 17); !sameKinds(got, Updated) {
		t.Fatalf("restart after the first fell silent: %v", got)
	}
	if url() != x.URL || d.Stats().URLChanges != 1 || d.Stats().Takeovers != 1 {
		t.Fatalf("after the restart: url %s, %+v", url(), d.Stats())
	}
	// A restart in the same place, after a clean shutdown: immediate.
	d.Apply(Change[WorkerRecord]{Kind: Deleted, Key: "k"}, at(18))
	a.Instance = "third"
	if got := put(a, 19); !sameKinds(got, Added) {
		t.Fatalf("after a deregistration: %v", got)
	}
	// Records without an instance id (older registrants): no checks.
	b := a
	b.Instance = ""
	if got := put(b, 20); !sameKinds(got, Updated) {
		t.Fatalf("instance-less record: %v", got)
	}
	if got := put(x, 20); !sameKinds(got, Updated) {
		t.Fatalf("after an instance-less record: %v", got)
	}
}

// A record that lapsed during the router's own NATS outage is kept when it
// comes back from the same instance (no Removed, no Added: its index
// stays), and replaced when it comes back from another.
func TestDirectoryLapsedDuringOutage(t *testing.T) {
	d, _, _ := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract(), Takeover: time.Second}, nil, nil, time.Unix(0, 0))
	t0 := time.Unix(1000, 0)
	a := rec("a", 16)
	a.ID, a.Instance = 1, "one"
	d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: a}, t0)
	lapsed := func(r WorkerRecord, at time.Time) []NoteKind {
		return kinds(d.Apply(Change[WorkerRecord]{Kind: Put, Key: "k", Value: r, Lapsed: true}, at))
	}
	if got := lapsed(a, t0.Add(time.Minute)); !sameKinds(got) {
		t.Fatalf("same instance: %v", got)
	}
	if w, ok := d.Get(1); !ok || w.Status.Since != t0 {
		t.Fatalf("the worker was not kept as it was: %+v", w)
	}
	b := a
	b.Instance = "two"
	if got := lapsed(b, t0.Add(2*time.Minute)); !sameKinds(got, Removed, Added) {
		t.Fatalf("another instance: %v", got)
	}
	c := b
	c.Instance = ""
	if got := lapsed(c, t0.Add(3*time.Minute)); !sameKinds(got, Removed, Added) {
		t.Fatalf("no instance: %v", got)
	}
}
