package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRequestExpiry: a booking whose Free was lost expires after Dynamo's
// 3600 s, checked every 30 s, by default; both are settings of serve and
// up that reach the router's ledger, and bad values are refused naming
// the flag.
func TestRequestExpiry(t *testing.T) {
	c, err := Load(nil, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.RouterConfig().Sequences; sc.Expiry != 3600*time.Second || sc.ExpirySweep != 30*time.Second {
		t.Fatalf("defaults: expiry %v, sweep %v; want 1h and 30s", sc.Expiry, sc.ExpirySweep)
	}
	args := []string{"--router-request-expiry", "2h", "--router-request-sweep-interval", "5s"}
	c, err = Load(args, Options{Name: "serve"})
	if err != nil {
		t.Fatal(err)
	}
	if sc := c.RouterConfig().Sequences; sc.Expiry != 2*time.Hour || sc.ExpirySweep != 5*time.Second {
		t.Fatalf("serve flags: expiry %v, sweep %v; want 2h and 5s", sc.Expiry, sc.ExpirySweep)
	}
	u, _, err := LoadCommand[Up](nil, DefaultUp, Options{Name: "up", Environ: []string{
		"KVROUTER_ROUTER_REQUEST_EXPIRY=0s", "KVROUTER_ROUTER_REQUEST_SWEEP_INTERVAL=1m"}})
	if err != nil {
		t.Fatal(err)
	}
	if sc := u.Router().RouterConfig().Sequences; sc.Expiry != 0 || sc.ExpirySweep != time.Minute {
		t.Fatalf("up from the environment: expiry %v, sweep %v; want 0 and 1m", sc.Expiry, sc.ExpirySweep)
	}
	for _, bad := range [][]string{
		{"--router-request-expiry", "-1s"},
		{"--router-request-sweep-interval", "0s"},
	} {
		_, err := Load(bad, Options{Name: "serve"})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: %v, want ErrInvalid naming %s", bad, err, bad[0])
		}
	}
}
