package vllmzmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/eventplane/vllmzmq/batchseq"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
)

// State is how far the router can trust a worker rank's indexed blocks
// (batchseq.State: the stream's rules live in the pure package batchseq).
type State = batchseq.State

// Subscriber states (see batchseq.StateSyncing and the others). They map
// onto the router's worker states: Syncing and Exact are EXACT once
// synced, Degraded is DEGRADED.
const (
	StateSyncing  = batchseq.StateSyncing
	StateExact    = batchseq.StateExact
	StateDegraded = batchseq.StateDegraded
)

// StateChange reports a new state of one worker rank's stream.
type StateChange struct {
	// Worker is the worker rank.
	Worker kvevent.WorkerRank
	// State is the new state.
	State State
	// Reason explains it for operators ("replay could not cover sequences
	// 812–830: ...").
	Reason string
}

// Handler receives a subscriber's output. Its methods are called from the
// subscriber's goroutine, one at a time, in stream order; they should
// return quickly (apply to the index, enqueue), since the subscriber reads
// nothing while they run.
type Handler interface {
	// Apply receives the accepted events of one batch, in order. A Cleared
	// event means: drop every block of the worker rank (the engine reset its
	// cache, or the subscriber lost events it cannot recover).
	Apply(seq uint64, events []kvevent.Event)
	// StateChanged reports a change of state or reason.
	StateChanged(StateChange)
}

// RefusalHandler is an optional extension of Handler: a handler that
// implements it also hears, for every batch with refused events, what was
// refused and why (e.g. "block size 32 ≠ 16"), before Apply of that batch.
// The refusals are counted in the metrics either way; this lets the owner
// of the worker's state surface a persistent cause (a worker configured
// with another block size than it publishes) instead of a silent counter.
type RefusalHandler interface {
	Refused(seq uint64, refusals []vllm.Refusal)
}

// SubscriberConfig configures a Subscriber for one (endpoint, dp rank).
type SubscriberConfig struct {
	// Worker is the worker rank the events belong to. Required.
	Worker kvevent.WorkerRank
	// Endpoint is the PUB endpoint to dial, already offset for the rank
	// (see OffsetEndpoint), e.g. "tcp://10.0.0.5:5557". Required.
	Endpoint string
	// ReplayEndpoint is the ROUTER replay endpoint, offset for the rank;
	// empty means none (gaps then always clear the rank).
	ReplayEndpoint string
	// Topic is the subscription prefix; empty subscribes to everything.
	Topic string
	// BlockSize is the worker's KV block size in tokens; stored events with
	// another size are refused. Required.
	BlockSize int
	// Limits caps payload sizes (default vllm.DefaultLimits()).
	Limits vllm.Limits
	// DialRetry is the wait between dial attempts (default 250 ms). Dials
	// retry forever, and a dropped connection is redialled (pausing up to
	// 5 s while connections keep failing).
	DialRetry time.Duration
	// ReplayTimeout bounds one replay, connection included (default 5 s).
	ReplayTimeout time.Duration
	// LiveBuffer is how many live messages are held while a replay runs
	// (default 4096); past it the socket stops reading (TCP back-pressure).
	LiveBuffer int
	// MaxFrameBytes caps the size a publisher may announce for one ZMTP
	// frame, on the SUB and the replay connections; a larger announcement
	// drops the connection before anything is allocated for it. 0 means
	// zmtpguard.DefaultMaxFrameBytes (64 MiB).
	MaxFrameBytes int
	// Logger receives the subscriber's logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics, when not nil, records the subscriber's counters.
	Metrics *Metrics
}

// DefaultSubscriberConfig returns the defaults; Worker, Endpoint and
// (unless 16 is right) BlockSize are still to be set.
func DefaultSubscriberConfig() SubscriberConfig {
	return SubscriberConfig{BlockSize: 16, Limits: vllm.DefaultLimits(), DialRetry: 250 * time.Millisecond,
		ReplayTimeout: 5 * time.Second, LiveBuffer: 4096}
}

// Validate checks the configuration.
func (c SubscriberConfig) Validate() error {
	if c.Endpoint == "" {
		return errors.New("vllmzmq subscriber: endpoint is required")
	}
	if c.DialRetry <= 0 || c.ReplayTimeout <= 0 || c.LiveBuffer <= 0 {
		return fmt.Errorf("vllmzmq subscriber: dial retry %v, replay timeout %v and live buffer %d must be positive",
			c.DialRetry, c.ReplayTimeout, c.LiveBuffer)
	}
	if c.MaxFrameBytes < 0 {
		return fmt.Errorf("vllmzmq subscriber: max frame bytes %d is negative", c.MaxFrameBytes)
	}
	return nil
}

// Status is a snapshot of a subscriber for operators (/v1/workers).
type Status struct {
	// State and Reason are the last reported state.
	State  State
	Reason string
	// LastSeq is the last applied sequence number, valid when HasSeq.
	LastSeq uint64
	HasSeq  bool
	// Connected is true once the SUB socket has dialled the endpoint.
	Connected bool
}

// Subscriber consumes one engine rank's event stream. Create it with
// NewSubscriber and run it with Run. The stream's rules (order, gaps,
// duplicates, restarts, states) are a batchseq.Machine; the subscriber
// owns the sockets, the goroutines, the decoder and the reporting.
type Subscriber struct {
	cfg SubscriberConfig
	h   Handler
	log *slog.Logger
	dec *vllm.Decoder
	m   rankMetrics
	rp  replayer // nil without a replay endpoint
	// guard caps the frames of the SUB and replay connections.
	guard zmtpguard.Options

	// Owned by the Run goroutine.
	seq        *batchseq.Machine
	warnedRank bool // logged a dp-rank mismatch once

	mu     sync.Mutex
	status Status
}

// NewSubscriber returns a subscriber that reports to h.
func NewSubscriber(cfg SubscriberConfig, h Handler) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("vllmzmq subscriber: handler is required")
	}
	dc := vllm.DefaultConfig()
	dc.Worker, dc.BlockSize, dc.Limits = cfg.Worker, cfg.BlockSize, cfg.Limits
	dec, err := vllm.NewDecoder(dc)
	if err != nil {
		return nil, fmt.Errorf("vllmzmq subscriber: %w", err)
	}
	s := &Subscriber{cfg: cfg, h: h, log: cfg.Logger, dec: dec,
		m: cfg.Metrics.forWorker(strconv.FormatUint(uint64(cfg.Worker.ID), 10), strconv.FormatUint(uint64(cfg.Worker.Rank), 10))}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("worker", cfg.Worker.String(), "endpoint", cfg.Endpoint)
	s.guard = zmtpguard.Options{MaxFrameBytes: uint64(cfg.MaxFrameBytes),
		Refused: zmtpguard.LogRefusals(s.log, "KV event subscriber", s.m.framesRefused.Inc)}
	if cfg.ReplayEndpoint != "" {
		s.rp = &dealerReplayer{endpoint: cfg.ReplayEndpoint, retry: cfg.DialRetry, timeout: cfg.ReplayTimeout, log: s.log,
			guard: s.guard}
	}
	return s, nil
}

// machine returns the stream's state machine, made on first use so that
// it sees whether a replayer is set (tests set rp after NewSubscriber).
func (s *Subscriber) machine() *batchseq.Machine {
	if s.seq == nil {
		s.seq = batchseq.New(output{s}, s.rp != nil)
	}
	return s.seq
}

// drive runs the replays the machine asks for, one after another.
func (s *Subscriber) drive(ctx context.Context, st batchseq.Step) {
	m := s.machine()
	for st.Replay {
		err := s.rp.Replay(ctx, st.From, m.ReplayBatch)
		st = m.ReplayDone(err, ctx.Err() != nil)
	}
}

// Status returns a snapshot; safe from any goroutine.
func (s *Subscriber) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Run connects, syncs and applies the stream until ctx is cancelled; it
// returns nil then. Run must be called once.
func (s *Subscriber) Run(ctx context.Context) error {
	s.machine().Syncing("connecting to " + s.cfg.Endpoint)
	sub, err := s.connect(ctx)
	if err != nil || sub == nil {
		return err
	}
	s.mu.Lock()
	s.status.Connected = true
	s.mu.Unlock()

	msgs := make(chan zmq4.Msg, s.cfg.LiveBuffer)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.read(ctx, sub, msgs)
	}()
	defer wg.Wait()

	s.initialSync(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			s.live(ctx, m)
		}
	}
}

// connect opens a SUB socket and dials the endpoint, retrying while the
// ZMTP handshake fails (a peer that is not a publisher, or one dropped for
// an oversized frame: the port may be taken over by the real engine
// later), after DialRetry, doubling up to maxRedialWait; refused
// connections are retried by zmq4 itself, every DialRetry. It returns a
// nil socket when ctx ends first.
//
// The socket does not reconnect by itself (read redials with a new one):
// zmq4 v0.17.0's automatic reconnect dials again from inside the failed
// connection's error path, so a peer that keeps failing the handshake
// (closing at once, or dropped by the frame guard) made it recurse until
// the goroutine's stack overflowed, a fatal error.
func (s *Subscriber) connect(ctx context.Context) (*zmtpguard.Sock, error) {
	wait := s.cfg.DialRetry
	for attempt := 0; ; attempt++ {
		// The socket's context is its own, so that it can be drained at
		// the end (zmtpguard.Drain); closing it ends a dial.
		sub := zmtpguard.NewSock(s.guard, func(sctx context.Context) zmq4.Socket {
			return zmq4.NewSub(sctx, zmq4.WithDialerRetry(s.cfg.DialRetry), zmq4.WithDialerMaxRetries(-1), zmq4.WithLogger(zmqLogger))
		})
		if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
			sub.Shut(false, 0)
			return nil, fmt.Errorf("subscribing to %q: %w", s.cfg.Topic, err)
		}
		// zmq4 v0.17.0 reads the peer's greeting without a deadline: a
		// peer that accepted the connection and never answers would hold
		// Dial, and so shutdown, until it closes. Dial aside; stop waiting
		// on ctx (closing the socket ends the dial).
		dialed := make(chan error, 1)
		go func() { dialed <- sub.Dial(zmtpguard.Endpoint(s.cfg.Endpoint)) }()
		select {
		case err := <-dialed:
			if err == nil {
				sub.Watch(ctx) // ctx ending closes the connection: Recv returns
				return sub, nil
			}
			sub.Shut(false, 0)
			if ctx.Err() != nil {
				return nil, nil
			}
			s.m.recvErrors.Inc()
			msg := "KV event endpoint handshake failed; retrying"
			if attempt == 0 {
				s.log.Warn(msg, "err", err, "retry", wait)
			} else {
				s.log.Debug(msg, "err", err, "attempt", attempt+1)
			}
		case <-ctx.Done():
			sub.Abort() // ends the dial
			go func() {
				if err := <-dialed; err == nil {
					sub.Shut(true, drainWait)
				} else {
					sub.Shut(false, 0)
				}
			}()
			return nil, nil
		}
		if !sleep(ctx, wait) {
			return nil, nil
		}
		wait = min(2*wait, max(s.cfg.DialRetry, maxRedialWait))
	}
}

// drainWait bounds a socket's drain when its connection had already
// failed (see zmtpguard.Drain).
const drainWait = time.Second

// maxRedialWait caps the pause between connections that failed one after
// the other (zmq4 leaves a connection whose handshake failed to the
// garbage collector to close).
const maxRedialWait = 5 * time.Second

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// read moves live messages from the socket to msgs until ctx ends; when
// the connection drops it tells the stream and redials with a new socket,
// waiting longer each time a connection drops before delivering anything.
func (s *Subscriber) read(ctx context.Context, sub *zmtpguard.Sock, msgs chan<- zmq4.Msg) {
	// drain: whether sub may still have a reader (Recv has not returned
	// its connection's error).
	drain := true
	defer func() {
		if sub != nil {
			sub.Shut(drain, drainWait)
		}
	}()
	wait, delivered := s.cfg.DialRetry, false
	for {
		m, err := sub.Recv()
		drain = err == nil
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// The publisher went away. A restarted engine shows up as a
			// sequence going backwards.
			s.m.recvErrors.Inc()
			if delivered {
				s.log.Warn("KV event stream receive error; reconnecting", "err", err)
				wait = s.cfg.DialRetry
			} else {
				s.log.Debug("KV event stream receive error again; reconnecting", "err", err, "wait", wait)
			}
			// Tell the stream, in order, that what follows may come from a
			// new engine process.
			select {
			case msgs <- zmq4.Msg{}:
			case <-ctx.Done():
				return
			}
			sub.Shut(false, 0)
			sub = nil
			if !sleep(ctx, wait) {
				return
			}
			if !delivered {
				wait = min(2*wait, max(s.cfg.DialRetry, maxRedialWait))
			}
			delivered = false
			drain = true
			if sub, err = s.connect(ctx); sub == nil {
				if err != nil {
					s.log.Error("KV event stream cannot reconnect", "err", err)
				}
				return
			}
			continue
		}
		delivered = true
		select {
		case msgs <- m:
		case <-ctx.Done():
			return
		}
	}
}

// initialSync replays whatever the publisher still buffers, so a router
// that starts next to a running engine sees its recent blocks.
func (s *Subscriber) initialSync(ctx context.Context) {
	s.drive(ctx, s.machine().Start())
}

// live handles one message from the SUB socket.
func (s *Subscriber) live(ctx context.Context, m zmq4.Msg) {
	if m.Frames == nil {
		s.machine().Disconnected() // the connection dropped (see read)
		return
	}
	topic, seq, payload, ok := splitLive(m.Frames)
	if !ok {
		s.m.malformed.Inc()
		s.log.Warn("ignoring a message that is not [topic, seq, payload]", "frames", len(m.Frames))
		return
	}
	if !bytes.HasPrefix(topic, []byte(s.cfg.Topic)) {
		return
	}
	s.drive(ctx, s.machine().Live(seq, payload))
}

// output is the subscriber as the machine's Output.
type output struct{ s *Subscriber }

var _ batchseq.Output = output{}

// Batch decodes one in-order batch and hands its events on.
func (o output) Batch(seq uint64, payload []byte) error {
	s := o.s
	s.m.lastSeq.Set(float64(seq))
	s.mu.Lock()
	s.status.LastSeq, s.status.HasSeq = seq, true
	s.mu.Unlock()

	res, err := s.dec.Decode(payload)
	if err != nil {
		s.m.malformed.Inc()
		return err
	}
	s.m.batches.Inc()
	if res.DPRank != nil && *res.DPRank != int64(s.cfg.Worker.Rank) && !s.warnedRank {
		s.warnedRank = true
		s.log.Warn("KV event batches carry another data-parallel rank than this subscriber's: check the endpoint's port offset",
			"batch_rank", *res.DPRank, "rank", s.cfg.Worker.Rank)
	}
	for _, r := range res.Refused {
		s.m.refused[r.Reason].Inc()
		s.log.Debug("KV event refused", "seq", seq, "refusal", r.String())
	}
	if rh, ok := s.h.(RefusalHandler); ok && len(res.Refused) > 0 {
		rh.Refused(seq, res.Refused)
	}
	if len(res.Events) > 0 {
		s.m.applied.Add(float64(len(res.Events)))
		s.h.Apply(seq, res.Events)
	}
	return nil
}

// Clear drops every block of the worker rank.
func (o output) Clear(seq uint64) {
	o.s.dec.Reset()
	o.s.h.Apply(seq, []kvevent.Event{{Worker: o.s.cfg.Worker, Kind: kvevent.Cleared}})
}

// StateChanged records and reports a new state.
func (o output) StateChanged(st State, reason string) {
	s := o.s
	s.mu.Lock()
	s.status.State, s.status.Reason = st, reason
	s.mu.Unlock()
	s.log.Info("KV event stream state", "state", st.String(), "reason", reason)
	s.h.StateChanged(StateChange{Worker: s.cfg.Worker, State: st, Reason: reason})
}

// Count moves the counter's metric.
func (o output) Count(c batchseq.Counter) {
	m := &o.s.m
	switch c {
	case batchseq.Gaps:
		m.gaps.Inc()
	case batchseq.Duplicates:
		m.duplicates.Inc()
	case batchseq.ClearRestart:
		m.clearRestart.Inc()
	case batchseq.ClearGap:
		m.clearGap.Inc()
	case batchseq.ClearMalformed:
		m.clearMalformed.Inc()
	case batchseq.ReplayOK:
		m.replayOK.Inc()
	case batchseq.ReplayFailed:
		m.replayFailed.Inc()
	}
}

// Note logs a line of the machine's.
func (o output) Note(l batchseq.Level, msg string, args ...any) {
	if l == batchseq.Warn {
		o.s.log.Warn(msg, args...)
		return
	}
	o.s.log.Info(msg, args...)
}

// replayer fetches batches from a publisher's replay buffer. Stream logic
// depends only on this, so it can be tested without sockets.
type replayer interface {
	// Replay requests every batch from `from` on and calls fn for each, in
	// the order received, until the END marker. Once fn returns false it
	// is not called again, but the replies are still read to the END.
	Replay(ctx context.Context, from uint64, fn func(seq uint64, payload []byte) bool) error
}

var _ replayer = (*dealerReplayer)(nil)

// dealerReplayer asks over a fresh DEALER socket per replay.
type dealerReplayer struct {
	endpoint string
	retry    time.Duration
	timeout  time.Duration
	log      *slog.Logger
	guard    zmtpguard.Options
}

// Replay implements replayer over a DEALER dialled for this request alone.
// It returns within the timeout even when the peer accepted the TCP
// connection but never completes the ZMTP handshake (zmq4 v0.17.0 reads the
// greeting without a deadline, so Dial would block until the peer closes):
// the request is then abandoned, and fn is never called after Replay
// returns.
func (r *dealerReplayer) Replay(ctx context.Context, from uint64, fn func(uint64, []byte) bool) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var mu sync.Mutex
	gone := false
	guarded := func(seq uint64, payload []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		return !gone && fn(seq, payload)
	}
	done := make(chan error, 1)
	go func() { done <- r.replay(ctx, from, guarded) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	mu.Lock()
	gone = true
	mu.Unlock()
	select {
	case err := <-done:
		return err
	default:
		return fmt.Errorf("replay timed out after %v (no answer from %s)", r.timeout, r.endpoint)
	}
}

func (r *dealerReplayer) replay(ctx context.Context, from uint64, fn func(uint64, []byte) bool) error {
	d := zmtpguard.NewSock(r.guard, func(sctx context.Context) zmq4.Socket {
		return zmq4.NewDealer(sctx, zmq4.WithDialerRetry(r.retry), zmq4.WithDialerMaxRetries(-1), zmq4.WithLogger(zmqLogger))
	})
	stop := context.AfterFunc(ctx, d.Abort) // a dial retries until its socket's context ends
	err := d.Dial(zmtpguard.Endpoint(r.endpoint))
	if !stop() && err == nil {
		d.Shut(true, drainWait) // connected as ctx ended
		return fmt.Errorf("dialling replay endpoint %s: %w", r.endpoint, ctx.Err())
	}
	if err != nil {
		d.Shut(false, 0)
		return fmt.Errorf("dialling replay endpoint %s: %w", r.endpoint, err)
	}
	// Replies left unread (ctx ended) are drained: zmq4 v0.17.0 parks a
	// connection's reader for good when its queue is full at Close.
	d.Watch(ctx)
	drain := true
	defer func() { d.Shut(drain, drainWait) }()
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, seqFrame(from))); err != nil {
		return fmt.Errorf("sending replay request: %w", err)
	}
	wanted := true
	for {
		m, err := d.Recv()
		if err != nil {
			drain = false
			if ctx.Err() != nil {
				err = fmt.Errorf("replay timed out after %v", r.timeout)
			}
			return err
		}
		seq, payload, end, ok := splitReply(m.Frames)
		switch {
		case !ok:
			r.log.Warn("ignoring malformed replay reply", "frames", len(m.Frames))
		case end:
			return nil
		case wanted:
			// Unwanted replies are still read to the END: zmq4 v0.17.0 can
			// park a connection goroutine forever when replies are left
			// unread at Close.
			wanted = fn(seq, payload)
		}
	}
}
