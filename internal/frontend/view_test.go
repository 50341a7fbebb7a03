package frontend

import (
	"encoding/json"
	"testing"

	"github.com/kvrouter/kvrouter/internal/router"
)

// TestCandidateTiersBytes: a decision row's tiers, now a struct, encode
// to the same bytes as the map of tier names the API documented before.
func TestCandidateTiersBytes(t *testing.T) {
	for _, o := range []router.Overlap{{}, {Device: 3, Host: 5, Disk: 7, Shared: 11}, {Device: -1, Shared: 1 << 40}} {
		got, err := json.Marshal(tiersOf(o))
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(map[string]int{"device": o.Device, "host_pinned": o.Host, "disk": o.Disk, "shared": o.Shared})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("tiers of %+v: %s, want %s", o, got, want)
		}
	}
}
