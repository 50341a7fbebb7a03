package registry

import (
	"encoding/json"
	"testing"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
)

// The registry keeps the last RegistryHistory puts of each key, so a
// watcher's consumer that falls behind while a second process writes a
// worker's key still delivers the owner's heartbeats (the directory tells
// a takeover from a restart by them). A bucket made by an older version
// with one value per key is upgraded when a registry opens it; the
// negative control shows what one value per key loses.
func TestRegistryKeepsSupersededHeartbeats(t *testing.T) {
	js := natstest.StartEmbedded(t).JetStream()
	ctx := t.Context()
	cfg := DefaultRegistryConfig()
	cfg.Bucket = "reg"
	key := RecordKey(fleet.DeriveID("w"))
	rec := func(instance string) fleet.WorkerRecord {
		return fleet.WorkerRecord{ID: fleet.DeriveID("w"), Name: "w", URL: "http://127.0.0.1:9001", BlockSize: 16, DPSize: 1, Instance: instance}
	}
	// the owner's heartbeat, then three puts by a rival, as a watcher
	// that lagged behind all four would find them
	putAll := func(b *Bucket[fleet.WorkerRecord]) {
		t.Helper()
		for _, inst := range []string{"owner", "rival", "rival", "rival"} {
			if err := b.Put(ctx, key, rec(inst)); err != nil {
				t.Fatal(err)
			}
		}
	}
	instances := func() []string {
		t.Helper()
		kv, err := js.KeyValue(ctx, cfg.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		es, err := kv.History(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			var r fleet.WorkerRecord
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r.Instance)
		}
		return out
	}

	old, err := OpenBucket[fleet.WorkerRecord](ctx, js, cfg.Bucket, cfg.TTL, nil)
	if err != nil {
		t.Fatal(err)
	}
	putAll(old)
	if got := instances(); len(got) != 1 || got[0] != "rival" {
		t.Fatalf("one value per key kept %v, want only the last rival put", got)
	}

	reg, err := OpenRegistry(ctx, js, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	putAll(reg.Bucket())
	got := instances()
	if len(got) != RegistryHistory || got[0] != "owner" {
		t.Fatalf("registry kept %v, want the owner's heartbeat and the three rival puts after it", got)
	}
}
