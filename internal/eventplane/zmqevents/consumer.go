package zmqevents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Recovery tunes queries, retries and buffering (AcceptUnknown is
	// forced off: every worker is dialled from its record).
	Recovery recovery.Config
	// DialRetry is the wait between dial attempts. Default 250 ms.
	DialRetry time.Duration
	// MaxFrameBytes caps the size a worker may announce for one ZMTP frame,
	// on the SUB and the query connections; a larger announcement drops the
	// connection before anything is allocated for it. 0 means
	// zmtpguard.DefaultMaxFrameBytes (64 MiB).
	MaxFrameBytes int
}

// DefaultConsumerConfig returns the defaults documented on the fields.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{Recovery: recovery.DefaultConfig(), DialRetry: 250 * time.Millisecond}
}

// Consumer is a router's end of the ZMQ event plane: one SUB per worker
// (its record's Events.Endpoint) and queries to its Events.Replay ROUTER.
type Consumer struct {
	cfg     ConsumerConfig
	tracker *recovery.Tracker
	m       *recovery.Metrics
	recv    prometheus.Counter
	log     *slog.Logger
	q       *querier
	guard   zmtpguard.Options

	mu      sync.Mutex
	workers map[kvevent.WorkerID]*sub
	closed  bool // Close has begun: start follows nothing more
	wg      sync.WaitGroup
}

type sub struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// NewConsumer returns a consumer applying to a; onState may be nil; reg
// nil means metrics are not exported; log may be nil.
func NewConsumer(cfg ConsumerConfig, a recovery.Applier, onState recovery.StateFunc, reg *prometheus.Registry, log *slog.Logger) (*Consumer, error) {
	if cfg.DialRetry <= 0 {
		return nil, errors.New("zmqevents: dial retry must be positive")
	}
	if cfg.MaxFrameBytes < 0 {
		return nil, fmt.Errorf("zmqevents: max frame bytes %d is negative", cfg.MaxFrameBytes)
	}
	cfg.Recovery.AcceptUnknown = false
	if log == nil {
		log = slog.Default()
	}
	m, err := recovery.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	guard := zmtpguard.Options{MaxFrameBytes: uint64(cfg.MaxFrameBytes),
		Refused: zmtpguard.LogRefusals(log, "event plane consumer", m.FrameRefused)}
	q := &querier{endpoints: map[kvevent.WorkerID]string{}, retry: cfg.DialRetry, guard: guard}
	t, err := recovery.NewTracker(cfg.Recovery, q, a, onState, m, log)
	if err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg, tracker: t, m: m, recv: m.Received("zmq"), log: log, q: q, guard: guard,
		workers: map[kvevent.WorkerID]*sub{}}, nil
}

// Notify folds a directory notification in: Added dials the worker's
// event endpoint, then asks each rank for a dump; Removed closes it and
// drops the worker's blocks. It does not wait for a dial: a worker whose
// endpoint is slow, or accepts and never answers, holds neither the
// caller nor the other workers.
func (c *Consumer) Notify(n fleet.Notification) {
	rec := n.Worker.Record
	switch n.Kind {
	case fleet.Removed:
		c.stop(rec.ID)
		c.tracker.Remove(rec.ID)
	case fleet.Added:
		if rec.Events.Endpoint == "" {
			return
		}
		c.start(rec)
	}
}

// start follows rec's worker unless it is followed already: on a
// goroutine of its own, it dials the SUB, then adds the worker's ranks to
// the tracker (which asks each for a dump) and reads. The dial ends with
// stop (its context).
func (c *Consumer) start(rec fleet.WorkerRecord) {
	c.mu.Lock()
	if _, ok := c.workers[rec.ID]; ok || c.closed {
		// A notification racing Close must not start a follower Close
		// would neither stop nor wait for (nor add to the wait group
		// Close is waiting on).
		c.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &sub{cancel: cancel, done: make(chan struct{})}
	c.workers[rec.ID] = w
	c.q.set(rec.ID, rec.Events.Replay)
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer close(w.done)
		s, err := c.dial(ctx, rec.Events.Endpoint)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("event plane: cannot follow worker", "worker_id", uint64(rec.ID), "err", err)
				c.forget(rec.ID, w) // a later Added tries again
			}
			return
		}
		// Removed waits for this goroutine before it removes the ranks,
		// so these adds cannot outlive the worker.
		for r := rec.DPStart; r < rec.DPStart+max(rec.DPSize, 1); r++ {
			c.tracker.Add(kvevent.WorkerRank{ID: rec.ID, Rank: kvevent.DPRank(r)})
		}
		c.read(ctx, rec.ID, rec.Events.Endpoint, s)
	}()
}

// forget drops w, the follower of id, if it is still the current one.
func (c *Consumer) forget(id kvevent.WorkerID, w *sub) {
	c.mu.Lock()
	if c.workers[id] == w {
		delete(c.workers, id)
	}
	c.mu.Unlock()
}

// dial opens a SUB socket on ep. The socket does not reconnect by itself
// (read redials with a new one): zmq4 v0.17.0's automatic reconnect dials
// again from inside the failed connection's error path, so a worker
// endpoint that keeps failing the handshake made it recurse until the
// stack overflowed, a fatal error.
func (c *Consumer) dial(ctx context.Context, ep string) (*sock, error) {
	return openSock(ctx, c.guard, ep, func(sctx context.Context) zmq4.Socket {
		return zmq4.NewSub(sctx, zmq4.WithDialerRetry(c.cfg.DialRetry), zmq4.WithDialerMaxRetries(-1), zmq4.WithLogger(zmqLogger))
	}, func(s zmq4.Socket) error { return s.SetOption(zmq4.OptionSubscribe, Topic) })
}

// drainWait bounds a socket's drain when its connection had already
// failed (see zmtpguard.Drain).
const drainWait = time.Second

// sock is a SUB or DEALER socket closed with a drain (zmtpguard.Sock).
type sock struct{ *zmtpguard.Sock }

// openSock makes a socket with mk, sets it up and dials ep; ctx ending
// stops the dial, and later closes the connection, which ends a waiting
// Recv with the connection's error.
func openSock(ctx context.Context, guard zmtpguard.Options, ep string, mk func(context.Context) zmq4.Socket,
	setup func(zmq4.Socket) error) (*sock, error) {
	s := &sock{zmtpguard.NewSock(guard, mk)}
	if setup != nil {
		if err := setup(s.Socket); err != nil {
			s.close(false)
			return nil, err
		}
	}
	stop := context.AfterFunc(ctx, s.Abort) // a dial retries until its socket's context ends
	err := s.Dial(zmtpguard.Endpoint(ep))
	if !stop() && err == nil {
		s.close(true) // connected as ctx ended
		return nil, fmt.Errorf("dialling %s: %w", ep, ctx.Err())
	}
	if err != nil {
		s.close(false)
		return nil, fmt.Errorf("dialling %s: %w", ep, err)
	}
	s.Watch(ctx)
	return s, nil
}

// close closes the socket; drain unless Recv already returned the
// connection's error (its reader is gone).
func (s *sock) close(drain bool) { s.Shut(drain, drainWait) }

// maxRedialWait caps the pause between connections to a worker that
// failed one after the other.
const maxRedialWait = 5 * time.Second

// read applies worker id's events from s until ctx ends; when the
// connection drops it redials ep with a new socket, after DialRetry,
// doubling up to maxRedialWait while connections fail before delivering
// anything.
func (c *Consumer) read(ctx context.Context, id kvevent.WorkerID, ep string, s *sock) {
	// drain: whether s may still have a reader (Recv has not returned
	// its connection's error).
	drain := true
	defer func() {
		if s != nil {
			s.close(drain)
		}
	}()
	wait := c.cfg.DialRetry
	for {
		// ctx ending closes the connection: Recv then returns what was
		// queued and the connection's error.
		m, err := s.Recv()
		drain = err == nil
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.close(false)
			s = nil
			for s == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				wait = min(2*wait, max(c.cfg.DialRetry, maxRedialWait))
				// Dial aside: a peer that accepted the connection and never
				// answers would hold it (zmq4 reads the greeting without a
				// deadline), and stop waits for this goroutine.
				dialed := make(chan *sock, 1)
				go func() {
					ns, err := c.dial(ctx, ep)
					if err != nil {
						c.log.Debug("event plane: redial failed", "worker_id", uint64(id), "err", err)
					}
					dialed <- ns
				}()
				select {
				case s = <-dialed:
					drain = true
				case <-ctx.Done():
					go func() {
						if ns := <-dialed; ns != nil {
							ns.close(true)
						}
					}()
					return
				}
			}
			continue
		}
		wait = c.cfg.DialRetry
		if len(m.Frames) < 2 {
			c.m.Malformed()
			continue
		}
		c.recv.Inc()
		ev, env, err := dynamo.Decode(m.Frames[len(m.Frames)-1])
		if err != nil || ev.Worker.ID != id {
			c.m.Malformed()
			c.log.Warn("event plane: malformed or foreign event", "worker_id", uint64(id), "err", err)
			continue
		}
		var pub uint64
		if env != nil {
			pub = env.PublisherID
		}
		c.tracker.Live(ev, pub)
	}
}

func (c *Consumer) stop(id kvevent.WorkerID) {
	c.mu.Lock()
	w := c.workers[id]
	delete(c.workers, id)
	c.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// Resync asks every worker rank for what it may have missed.
func (c *Consumer) Resync() { c.tracker.Resync() }

// Close stops every subscription and follower.
func (c *Consumer) Close() error {
	c.mu.Lock()
	c.closed = true
	ids := make([]kvevent.WorkerID, 0, len(c.workers))
	for id := range c.workers {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	for _, id := range ids {
		c.stop(id)
	}
	c.tracker.Close()
	c.wg.Wait()
	return nil
}

// querier asks a worker's ROUTER over a DEALER dialled per query.
type querier struct {
	mu        sync.Mutex
	endpoints map[kvevent.WorkerID]string
	retry     time.Duration
	guard     zmtpguard.Options
}

func (q *querier) set(id kvevent.WorkerID, ep string) {
	q.mu.Lock()
	q.endpoints[id] = ep
	q.mu.Unlock()
}

// Query implements recovery.Querier.
func (q *querier) Query(ctx context.Context, req recovery.Request) (recovery.Reply, error) {
	q.mu.Lock()
	ep := q.endpoints[req.Worker.ID]
	q.mu.Unlock()
	if ep == "" {
		return recovery.Reply{}, fmt.Errorf("query %v: worker has no recovery endpoint", req)
	}
	d, err := openSock(ctx, q.guard, ep, func(sctx context.Context) zmq4.Socket {
		return zmq4.NewDealer(sctx, zmq4.WithDialerRetry(q.retry), zmq4.WithDialerMaxRetries(-1), zmq4.WithLogger(zmqLogger))
	}, nil)
	if err != nil {
		return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
	}
	// A reply cut short (ctx ended, a malformed part) may leave parts
	// queued: d is drained.
	drain := true
	defer func() { d.close(drain) }()
	if err := d.Send(zmq4.NewMsgFrom(recovery.EncodeRequest(req))); err != nil {
		return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
	}
	var a recovery.Assembler
	for {
		m, err := d.Recv()
		if err != nil {
			drain = false
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
		}
		if len(m.Frames) == 0 {
			continue
		}
		done, err := a.AddEncoded(m.Frames[len(m.Frames)-1])
		if err != nil {
			return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
		}
		if done {
			return a.Reply(), nil
		}
	}
}
