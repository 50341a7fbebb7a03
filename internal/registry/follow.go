package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Follow applies the watcher's changes to d until ctx ends or the watcher
// stops, handing each notification to sink (on this goroutine, in order),
// with the local clock as the time of each change. synced, if not nil, is
// called once when the registry's initial values have all been applied.
// A record whose worker id does not match its key (RecordKey) is applied
// as Invalid.
func Follow(ctx context.Context, d *fleet.Directory, w *Watcher[fleet.WorkerRecord], sink func(fleet.Notification), synced func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case c, ok := <-w.C():
			if !ok {
				return
			}
			if c.Kind == fleet.Synced {
				if synced != nil {
					synced()
					synced = nil
				}
				continue
			}
			if c.Kind == fleet.Put && c.Key != RecordKey(c.Value.ID) {
				// A record under another worker's key: Register never
				// writes one, and taken as it is it would replace that
				// worker (its instance checks included) under a new id.
				c = fleet.Change[fleet.WorkerRecord]{Kind: fleet.Invalid, Key: c.Key, Initial: c.Initial,
					Err: fmt.Errorf("record under key %s names worker id %d (its key is %s)", c.Key, uint64(c.Value.ID), RecordKey(c.Value.ID))}
			}
			for _, n := range d.Apply(c, time.Now()) {
				sink(n)
			}
		}
	}
}
