package fleet

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// ownerKey is a map lookup kept beside byKey (a scan of byKey made the
// first read of a 1,024-record registry quadratic). Against the scan, after
// any sequence of puts (any of a few ids and names under any of a few
// keys, so that ids and names clash), deletions and expiries.
func TestOwnerKeyMatchesAScanOfTheKeys(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d, _, err := NewDirectory(Expect{BlockSize: 16, Hash: DefaultHashContract()}, nil, nil, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{"k1", "k2", "k3", "k4"}
		ids := []kvevent.WorkerID{1, 2, 3}
		now := time.Unix(1, 0)
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			key := rapid.SampledFrom(keys).Draw(t, "key")
			var c Change[WorkerRecord]
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				r := rec(rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "name"), 16)
				r.ID = rapid.SampledFrom(ids).Draw(t, "id")
				c = Change[WorkerRecord]{Kind: Put, Key: key, Value: r}
			case 2:
				c = Change[WorkerRecord]{Kind: Deleted, Key: key}
			case 3:
				c = Change[WorkerRecord]{Kind: Expired, Key: key}
			}
			now = now.Add(time.Second)
			d.Apply(c, now)
			for _, id := range ids {
				want, wantOK := "", false
				for k, v := range d.byKey {
					if v == id {
						if wantOK {
							t.Fatalf("id %d held by keys %s and %s", id, want, k)
						}
						want, wantOK = k, true
					}
				}
				if got, ok := d.ownerKey(id); got != want || ok != wantOK {
					t.Fatalf("ownerKey(%d) = %q, %v; the keys say %q, %v", id, got, ok, want, wantOK)
				}
			}
			if len(d.keyOf) != len(d.byKey) {
				t.Fatalf("%d ids for %d keys", len(d.keyOf), len(d.byKey))
			}
		}
	})
}
