package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker"
)

// errStopped is what a stream gets when the worker stops under it.
var errStopped = errors.New("worker is shutting down")

// stream carries one engine request's outputs from the rank goroutine to
// the HTTP handler. The rank never blocks on a slow client: outputs queue
// here and the handler is nudged through notify (shared by all streams of
// one HTTP request).
type stream struct {
	mu      sync.Mutex
	outs    []mocker.Output
	err     error
	done    bool
	notify  chan struct{}
	arrived time.Time
	last    time.Time
}

func newStream(notify chan struct{}) *stream {
	return &stream{notify: notify, arrived: time.Now()}
}

func (s *stream) push(o mocker.Output) {
	s.mu.Lock()
	s.outs = append(s.outs, o)
	if o.Finished {
		s.done = true
	}
	s.mu.Unlock()
	s.poke()
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	if !s.done {
		s.err, s.done = err, true
	}
	s.mu.Unlock()
	s.poke()
}

func (s *stream) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the queued outputs and whether the stream ended.
func (s *stream) take(dst []mocker.Output) ([]mocker.Output, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = append(dst[:0], s.outs...)
	s.outs = s.outs[:0]
	return dst, s.done, s.err
}

type rankCmd struct {
	add   *mocker.Request
	st    *stream
	abort uint64
	reset chan error
	call  func(*mocker.Engine) // run on the rank goroutine (pd.go)
}

// rank runs one engine core on the real clock.
type rank struct {
	idx      int
	eng      *mocker.Engine
	cmds     chan rankCmd
	inflight atomic.Int64
	streams  map[uint64]*stream
	metrics  *rankMetrics
	local    *localindex.Index
	worker   kvevent.WorkerRank
	faults   *faultSink
}

func (r *rank) apply(c rankCmd) {
	switch {
	case c.call != nil:
		c.call(r.eng)
		r.metrics.update(r.eng.Stats())
	case c.add != nil:
		if err := r.eng.Add(*c.add); err != nil {
			r.inflight.Add(-1)
			c.st.fail(err)
			return
		}
		r.streams[c.add.ID] = c.st
		r.metrics.promptTokens.Add(float64(len(c.add.Tokens)))
	case c.reset != nil:
		evs, err := r.eng.Reset()
		if err == nil {
			r.publish(cloneEvents(evs)) // sinks may keep the batch; the engine reuses evs
		}
		c.reset <- err
	default:
		if r.eng.Abort(c.abort) {
			r.inflight.Add(-1)
			r.metrics.update(r.eng.Stats())
		}
		delete(r.streams, c.abort)
	}
}

// run steps the engine while it has work, sleeping for each step's
// modelled duration, and waits for commands while idle. Commands that
// arrive during a step join the next one.
func (r *rank) run(ctx context.Context) {
	defer func() {
		for id, st := range r.streams {
			st.fail(errStopped)
			delete(r.streams, id)
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if r.eng.Idle() {
			select {
			case <-ctx.Done():
				return
			case c := <-r.cmds:
				r.apply(c)
			}
			continue
		}
		for drained := false; !drained; {
			select {
			case c := <-r.cmds:
				r.apply(c)
			default:
				drained = true
			}
		}
		if r.eng.Idle() {
			continue
		}
		res := r.eng.Step()
		evs := cloneEvents(res.Events)
		outs := append([]mocker.Output(nil), res.Outputs...)
		dur := res.Duration
		if res.Scheduled == 0 {
			dur = time.Millisecond // nothing admissible yet: do not spin
		}
		timer.Reset(dur)
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				break wait
			case c := <-r.cmds:
				r.apply(c)
			}
		}
		r.metrics.update(r.eng.Stats())
		r.publish(evs)
		r.deliver(outs)
	}
}

func (r *rank) publish(evs []mocker.Event) {
	if len(evs) == 0 {
		return
	}
	kv := make([]kvevent.Event, len(evs))
	for i, e := range evs {
		kv[i] = e.KVEvent(r.worker)
	}
	r.local.Apply(kv)
	r.faults.publish(Batch{Rank: r.idx, TS: time.Now(), Events: evs})
}

func (r *rank) deliver(outs []mocker.Output) {
	now := time.Now()
	for _, o := range outs {
		st := r.streams[o.ID]
		if st == nil {
			continue // aborted during the step
		}
		r.metrics.genTokens.Inc()
		if o.First {
			r.metrics.ttft.Observe(now.Sub(st.arrived).Seconds())
		} else {
			r.metrics.itl.Observe(now.Sub(st.last).Seconds())
		}
		st.last = now
		st.push(o)
		if o.Finished {
			delete(r.streams, o.ID)
			r.inflight.Add(-1)
			r.metrics.e2e.Observe(now.Sub(st.arrived).Seconds())
			r.metrics.succ.Inc()
		}
	}
}

func cloneEvents(evs []mocker.Event) []mocker.Event {
	if len(evs) == 0 {
		return nil
	}
	out := make([]mocker.Event, len(evs))
	for i, e := range evs {
		out[i] = e
		out[i].Hashes = append([]uint64(nil), e.Hashes...)
		out[i].Tokens = append([]uint32(nil), e.Tokens...)
	}
	return out
}
