package discovery

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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
	prom := prometheus.NewRegistry()
	d, initial, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, prom, nil, time.Unix(0, 0))
	if err != nil || len(initial) != 0 {
		t.Fatal(initial, err)
	}
	t0 := time.Unix(1000, 0)
	a := rec("a", 16)
	a.ID = DeriveID("a")
	key := RecordKey(a.ID)
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
	if got := metricValue(t, prom, "kvrouter_discovery_conflicts_total", ""); got != 1 {
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
	put(RecordKey(b.ID), b, t0)
	got := kinds(d.Apply(Change[WorkerRecord]{Kind: Invalid, Key: RecordKey(b.ID), Err: errors.New("bad json")}, t0))
	if !sameKinds(got, Removed) {
		t.Fatalf("invalid: %v", got)
	}
	bad := rec("", 16)
	if got := put("x", bad, t0); !sameKinds(got) {
		t.Fatalf("nameless record: %v", got)
	}
	if got := metricValue(t, prom, "kvrouter_discovery_invalid_records_total", ""); got != 2 {
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
	if _, _, err := NewDirectory(Expect{}, []WorkerRecord{a, b}, nil, nil, time.Now()); err == nil {
		t.Fatal("duplicate static ids accepted")
	}
	if _, _, err := NewDirectory(Expect{}, []WorkerRecord{rec("", 16)}, nil, nil, time.Now()); err == nil {
		t.Fatal("invalid static record accepted")
	}
}
