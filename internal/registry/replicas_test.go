package registry

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
)

// On a three-node cluster, OpenRegistry creates the bucket with the
// configured replica count, and opening it again with another count
// rescales it (why every process must be given the same --nats-replicas).
func TestRegistryReplicasOnCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	js, err := jetstream.New(natstest.Connect(t, c.URLs()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	replicas := func() int {
		t.Helper()
		st, err := js.Stream(ctx, "KV_reg")
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.Replicas
	}
	cfg := DefaultRegistryConfig()
	cfg.Bucket, cfg.Replicas = "reg", 3
	if _, err := OpenRegistry(ctx, js, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if n := replicas(); n != 3 {
		t.Fatalf("bucket has %d replicas, want 3", n)
	}
	if _, err := OpenBucket[fleet.WorkerRecord](ctx, js, "reg", cfg.TTL, nil); err != nil {
		t.Fatal(err)
	}
	if n := replicas(); n != 1 {
		t.Fatalf("after OpenBucket (1 replica): %d replicas", n)
	}
}
