package affinity

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

var t0 = time.Unix(1_000_000, 0)

func w(id int) kvevent.WorkerRank { return kvevent.WorkerRank{ID: kvevent.WorkerID(id)} }

func TestBindLookupExpire(t *testing.T) {
	tb, err := New(Config{TTL: 10 * time.Second, MaxSessions: 100})
	if err != nil {
		t.Fatal(err)
	}
	tb.Bind("s1", w(1), t0)
	if got, ok := tb.Lookup("s1", t0.Add(9*time.Second)); !ok || got != w(1) {
		t.Fatalf("lookup at 9 s: %v %v", got, ok)
	}
	tb.Bind("s1", w(2), t0.Add(9*time.Second)) // a later request refreshes and moves it
	if got, ok := tb.Lookup("s1", t0.Add(18*time.Second)); !ok || got != w(2) {
		t.Fatalf("lookup at 18 s after a refresh at 9 s: %v %v", got, ok)
	}
	if _, ok := tb.Lookup("s1", t0.Add(19*time.Second)); ok || tb.Len() != 0 {
		t.Fatalf("binding live past its TTL (len %d)", tb.Len())
	}
	tb.Bind("", w(1), t0)
	tb.Bind(string(make([]byte, MaxSessionID+1)), w(1), t0)
	if tb.Len() != 0 {
		t.Fatal("bound an empty or over-long session id")
	}
}

func TestLearnFirstBindingWins(t *testing.T) {
	tb, _ := New(Config{TTL: 10 * time.Second, MaxSessions: 100})
	if !tb.Learn("s", w(3), t0) {
		t.Fatal("a peer's binding of an unknown session was not kept")
	}
	if tb.Learn("s", w(4), t0.Add(time.Second)) {
		t.Fatal("a second peer binding replaced the first")
	}
	if got, _ := tb.Lookup("s", t0.Add(2*time.Second)); got != w(3) {
		t.Fatalf("bound to %v, want the first binding 3", got)
	}
	tb.Forget(3)
	if _, ok := tb.Lookup("s", t0.Add(2*time.Second)); ok {
		t.Fatal("binding to a forgotten worker kept")
	}
}

func TestBoundedEvictsSoonestExpiring(t *testing.T) {
	tb, _ := New(Config{TTL: 100 * time.Second, MaxSessions: 3})
	for i := range 5 {
		tb.Bind(fmt.Sprint("s", i), w(i), t0.Add(time.Duration(i)*time.Second))
	}
	if tb.Len() != 3 {
		t.Fatalf("len %d, want the cap 3", tb.Len())
	}
	for i, want := range []bool{false, false, true, true, true} {
		if _, ok := tb.Lookup(fmt.Sprint("s", i), t0.Add(5*time.Second)); ok != want {
			t.Fatalf("s%d kept %v, want %v (the soonest expiring leave first)", i, ok, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{TTL: 0, MaxSessions: 1}, {TTL: time.Second, MaxSessions: 0}} {
		if _, err := New(c); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
}
