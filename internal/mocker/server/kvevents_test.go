package server

import "testing"

func TestParseKVEventsConfig(t *testing.T) {
	c, err := ParseKVEventsConfig(`{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557","replay_endpoint":"tcp://*:5600","topic":"kv-events","buffer_steps":5}`)
	if err != nil || !c.Enabled() || c.Topic != "kv-events" || c.BufferSteps != 5 || c.HWM != 100000 {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := ParseKVEventsConfig(`{"endpoint":"tcp://*:1"}`); err != nil || c.Enabled() {
		t.Fatalf("disabled by default: %+v %v", c, err)
	}
	for _, bad := range []string{`{"endpointt":"x"}`, `{"enable_kv_cache_events":true,"publisher":"kafka"}`,
		`{"enable_kv_cache_events":true,"endpoint":"ipc:///tmp/x"}`, `{"buffer_steps":0}`, `[`} {
		if _, err := ParseKVEventsConfig(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestOffsetEndpoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		off  int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 2, "tcp://*:5559"},
		{"tcp://127.0.0.1:0", 3, "tcp://127.0.0.1:0"},
		{"tcp://[::1]:7000", 1, "tcp://[::1]:7001"},
		{"inproc://ev", 0, "inproc://ev"},
		{"inproc://ev", 2, "inproc://ev_dp2"},
	} {
		if got, err := OffsetEndpoint(c.in, c.off); err != nil || got != c.want {
			t.Errorf("OffsetEndpoint(%q, %d) = %q, %v; want %q", c.in, c.off, got, err, c.want)
		}
	}
	for _, bad := range []string{"ipc:///x", "tcp://host", "tcp://*:99999", "tcp://*:65535", "tcp://:001", "tcp://*:+5", "tcp://*:-0", "tcp://*:"} {
		if _, err := OffsetEndpoint(bad, 1); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
