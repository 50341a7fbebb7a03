package index

import (
	"testing"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// TestDuplicateStoresCounted: a block stored again for a worker rank and
// tier that already holds it (same engine hash, same place in the tree)
// is a duplicate store, counted once per block; the same blocks stored for
// another worker, or on another tier, are not.
func TestDuplicateStoresCounted(t *testing.T) {
	x := mustNew(t, DefaultConfig())
	must := func(ev kvevent.Event) {
		t.Helper()
		if err := apply(t, x, ev); err != nil {
			t.Fatal(err)
		}
	}
	must(chain(w1, 0, 100, 11, 12))
	must(chain(w2, 0, 100, 11, 12))
	host := chain(w1, 0, 100, 11, 12)
	host.Tier = kvevent.TierHostPinned
	must(host)
	if got := x.Stats().DuplicateStores; got != 0 {
		t.Fatalf("first stores: %d duplicates, want 0", got)
	}
	must(chain(w1, 0, 100, 11, 12)) // both blocks again
	must(chain(w1, 101, 102, 13))   // a new child: not a duplicate
	must(chain(w1, 100, 101, 12))   // block 101 a third time
	if got := x.Stats().DuplicateStores; got != 3 {
		t.Fatalf("duplicates %d, want 3", got)
	}
}
