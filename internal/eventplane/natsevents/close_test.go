package natsevents_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/natsbus/natstest"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// A reconnect hook firing while the consumer closes: Reconnected must not
// add to the wait group Close is waiting on (the race detector caught
// that in the chaos suite; without the fix this test reports a DATA
// RACE under -race), and once Close has begun it starts nothing.
func TestReconnectedDuringClose(t *testing.T) {
	srv := natstest.StartServer(t, -1, false)
	nc := natstest.Connect(t, srv.ClientURL())
	c := newConsumer(t, nc, newView(), nil, nil)
	var calls atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				c.Reconnected()
				calls.Add(1)
			}
		}
	}()
	poll.Until(t, 10*time.Second, func() bool { return calls.Load() >= 100 }, "the hook firing")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	c.Reconnected() // after Close: returns at once, a no-op
}
