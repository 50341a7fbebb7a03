package router

import "testing"

func TestSetObserver(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RouterID = 7
	r := newRouter(t, cfg, serialIndex(t), 2)
	var got []LifecycleEvent
	r.SetObserver(func(ev LifecycleEvent) { got = append(got, ev) })
	if _, err := r.Route(Request{ID: "a", Tokens: tokens(1, 1, 32, 48)}); err != nil {
		t.Fatal(err)
	}
	if !r.Booked("a") || r.Booked("zz") {
		t.Fatal("Booked wrong before Free")
	}
	r.Free("a")
	if r.Booked("a") {
		t.Fatal("Booked after Free")
	}
	r.SetObserver(nil)
	if _, err := r.Route(Request{ID: "b", Tokens: tokens(1, 2, 32, 48)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Kind != AddRequest || got[1].Kind != Free || got[0].RouterID != 7 || got[0].RequestID != "a" {
		t.Fatalf("observed %+v", got)
	}
}
