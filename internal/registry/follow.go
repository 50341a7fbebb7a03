package registry

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// Follow applies the watcher's changes to d until ctx ends or the watcher
// stops, handing each notification to sink (on this goroutine, in order),
// with the local clock as the time of each change. synced, if not nil, is
// called once when the registry's initial values have all been applied.
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
			for _, n := range d.Apply(c, time.Now()) {
				sink(n)
			}
		}
	}
}
