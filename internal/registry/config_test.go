package registry

import (
	"flag"
	"testing"
	"time"
)

func TestRegistryConfig(t *testing.T) {
	c := DefaultRegistryConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--registry-ttl", "500ms"}); err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "kvrouter-workers" || c.TTL != 500*time.Millisecond {
		t.Errorf("%+v", c)
	}
	if err := c.Validate(); err == nil {
		t.Error("ttl below MinTTL accepted")
	}
	c.TTL, c.Bucket = time.Second, ""
	if err := c.Validate(); err == nil {
		t.Error("empty bucket accepted")
	}
	c.Bucket = "b"
	for _, r := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {time.Second, true}, {DefaultResync, true}, {999 * time.Millisecond, false}, {-time.Second, false}} {
		c.Resync = r.d
		if err := c.Validate(); (err == nil) != r.ok {
			t.Errorf("resync %v: %v", r.d, err)
		}
	}
	if d := DefaultRegistryConfig().Resync; d != 30*time.Second {
		t.Errorf("default resync %v", d)
	}
}
