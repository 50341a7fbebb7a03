package vllmzmq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
)

// PublisherConfig configures a Publisher; the fields mirror vLLM's
// KVEventsConfig.
type PublisherConfig struct {
	// Endpoint is where the PUB socket binds, e.g. "tcp://*:5557" as vLLM,
	// or "tcp://127.0.0.1:0" for a free port (read it back with
	// Publisher.Endpoint). Required.
	Endpoint string
	// ReplayEndpoint is where the ROUTER replay socket binds; empty means
	// no replay socket (vLLM's default).
	ReplayEndpoint string
	// Topic is the first frame of every message; may be empty.
	Topic string
	// BufferSteps is how many past batches replay can serve (default 10000).
	BufferSteps int
	// HWM is the PUB send high-water mark in messages (default 100000);
	// past it messages are dropped, as libzmq does. 0 means unlimited.
	HWM int
	// ReplayFormat is the shape of replay replies (default ReplayTopic,
	// current vLLM).
	ReplayFormat ReplayFormat
	// Format is the payload encoding (default: tagged maps, current vLLM).
	Format vllm.Format
	// DPRank is written into batches whose DPRank is nil, as vLLM does.
	DPRank int64
	// MaxFrameBytes caps the size a subscriber or replay client may
	// announce for one ZMTP frame (they send only subscriptions and
	// replay requests); a larger announcement drops its connection before
	// anything is allocated for it. 0 means
	// zmtpguard.DefaultMaxRequestBytes (64 KiB).
	MaxFrameBytes int
	// Logger receives replay errors; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultPublisherConfig returns vLLM's defaults with a loopback endpoint
// on a free port and no replay socket.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{Endpoint: "tcp://127.0.0.1:0", BufferSteps: 10000, HWM: 100000}
}

// Validate checks the configuration.
func (c PublisherConfig) Validate() error {
	if c.Endpoint == "" {
		return errors.New("vllmzmq publisher: endpoint is required")
	}
	if c.BufferSteps <= 0 {
		return fmt.Errorf("vllmzmq publisher: buffer_steps %d must be positive", c.BufferSteps)
	}
	if c.HWM < 0 {
		return fmt.Errorf("vllmzmq publisher: hwm %d is negative", c.HWM)
	}
	if c.MaxFrameBytes < 0 {
		return fmt.Errorf("vllmzmq publisher: max frame bytes %d is negative", c.MaxFrameBytes)
	}
	if c.ReplayFormat > ReplayLegacy {
		return fmt.Errorf("vllmzmq publisher: unknown replay format %d", c.ReplayFormat)
	}
	return nil
}

// Fault is a deliberate misbehaviour of one Publish call, for tests and the
// mock engine's fault injection.
type Fault uint8

// Faults.
const (
	// FaultNone publishes normally.
	FaultNone Fault = iota
	// FaultDropLive consumes a sequence number and keeps the batch for
	// replay but does not send it live: what a subscriber sees when PUB
	// drops a message (slow joiner, high-water mark). Replay can fill it.
	FaultDropLive
	// FaultLose consumes a sequence number and neither sends nor keeps the
	// batch: vLLM's behaviour when publish() fails. Replay cannot fill it.
	FaultLose
	// FaultDuplicate sends the message twice.
	FaultDuplicate
)

type buffered struct {
	seq     uint64
	payload []byte
}

// Publisher publishes KV event batches as vLLM's ZmqEventPublisher does:
// PUB with three-frame messages and an optional ROUTER replay socket.
// Publish may be called from several goroutines.
type Publisher struct {
	cfg    PublisherConfig
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	router *zmtpguard.RouterSock // nil without replay
	enc    *vllm.Encoder
	done   chan struct{}

	mu   sync.Mutex
	seq  uint64
	ring []buffered // oldest first, at most BufferSteps
	head int        // index of the oldest entry once the ring is full
}

// zmqLogger silences zmq4's own logging (accept errors after close).
var zmqLogger = log.New(io.Discard, "", 0)

// NewPublisher binds the sockets and starts serving replay requests.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel, enc: vllm.NewEncoder(cfg.Format),
		done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.Default()
	}
	guard := zmtpguard.Options{MaxFrameBytes: zmtpguard.Cap(cfg.MaxFrameBytes, zmtpguard.DefaultMaxRequestBytes),
		Refused: zmtpguard.LogRefusals(p.log, "KV event publisher "+cfg.Endpoint, nil)}
	pubGuard := guard
	pubGuard.MaxConnBytes = zmtpguard.DefaultMaxSubscriberBytes
	p.pub = zmq4.NewPub(zmtpguard.WithOptions(ctx, pubGuard), zmq4.WithLogger(zmqLogger))
	if cfg.HWM > 0 {
		_ = p.pub.SetOption(zmq4.OptionHWM, cfg.HWM)
	}
	if err := p.pub.Listen(zmtpguard.Endpoint(cfg.Endpoint)); err != nil {
		cancel()
		_ = p.pub.Close()
		return nil, fmt.Errorf("binding KV event publisher: %w", err)
	}
	if cfg.ReplayEndpoint == "" {
		close(p.done)
		return p, nil
	}
	p.router = zmtpguard.NewRouterSock(guard, func(sctx context.Context) zmq4.Socket {
		return zmq4.NewRouter(sctx, zmq4.WithLogger(zmqLogger))
	})
	if err := p.router.Listen(zmtpguard.Endpoint(cfg.ReplayEndpoint)); err != nil {
		cancel()
		_ = p.pub.Close()
		_ = p.router.Shut(0, 0)
		return nil, fmt.Errorf("binding KV event replay socket: %w", err)
	}
	go p.serveReplay()
	return p, nil
}

// boundEndpoint renders a socket's bound address as a dialable endpoint.
func boundEndpoint(s zmq4.Socket, configured string) string {
	if s == nil {
		return ""
	}
	a := s.Addr()
	if a == nil {
		return configured
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		host := ta.IP.String()
		if ta.IP.IsUnspecified() {
			host = "127.0.0.1"
		}
		return "tcp://" + net.JoinHostPort(host, fmt.Sprint(ta.Port))
	}
	return dialable(configured)
}

// Endpoint returns the live endpoint a subscriber can dial (with the real
// port when the configured one was 0).
func (p *Publisher) Endpoint() string { return boundEndpoint(p.pub, p.cfg.Endpoint) }

// ReplayEndpoint returns the replay endpoint a subscriber can dial, or ""
// without replay.
func (p *Publisher) ReplayEndpoint() string {
	if p.router == nil {
		return ""
	}
	return boundEndpoint(p.router, p.cfg.ReplayEndpoint)
}

// NextSeq returns the sequence number the next batch will get.
func (p *Publisher) NextSeq() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

// Publish encodes and publishes one batch; it returns the batch's sequence
// number.
func (p *Publisher) Publish(b vllm.RawBatch) (uint64, error) {
	return p.PublishFault(b, FaultNone)
}

// PublishFault publishes one batch with a deliberate fault.
func (p *Publisher) PublishFault(b vllm.RawBatch, f Fault) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b.DPRank == nil {
		r := p.cfg.DPRank
		b.DPRank = &r
	}
	payload, err := p.enc.Encode(b)
	if err != nil {
		return 0, err
	}
	return p.publishLocked(payload, f)
}

// PublishPayload publishes an already encoded payload.
func (p *Publisher) PublishPayload(payload []byte, f Fault) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.publishLocked(payload, f)
}

func (p *Publisher) publishLocked(payload []byte, f Fault) (uint64, error) {
	if p.ctx.Err() != nil {
		return 0, errors.New("vllmzmq publisher: closed")
	}
	seq := p.seq
	p.seq++
	if f == FaultLose {
		return seq, nil
	}
	p.remember(seq, payload)
	if f == FaultDropLive {
		return seq, nil
	}
	msg := zmq4.NewMsgFrom([]byte(p.cfg.Topic), seqFrame(seq), payload)
	n := 1
	if f == FaultDuplicate {
		n = 2
	}
	for range n {
		if err := p.pub.Send(msg); err != nil {
			return seq, fmt.Errorf("publishing KV event batch %d: %w", seq, err)
		}
	}
	return seq, nil
}

func (p *Publisher) remember(seq uint64, payload []byte) {
	e := buffered{seq: seq, payload: payload}
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, e)
		return
	}
	p.ring[p.head] = e
	p.head = (p.head + 1) % len(p.ring)
}

// since returns the buffered batches with seq ≥ start, oldest first.
func (p *Publisher) since(start uint64) []buffered {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []buffered
	for i := range p.ring {
		e := p.ring[(p.head+i)%len(p.ring)]
		if e.seq >= start {
			out = append(out, e)
		}
	}
	return out
}

// Restart simulates an engine restart: the sequence starts again at 0 and
// the replay buffer is emptied. The sockets stay bound.
func (p *Publisher) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq = 0
	p.ring = p.ring[:0]
	p.head = 0
}

// serveReplay answers [identity, "", start_seq] requests until Close.
func (p *Publisher) serveReplay() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 0 {
			p.log.Warn("invalid KV event replay request", "frames", len(msg.Frames))
			continue
		}
		start, ok := parseSeq(msg.Frames[2])
		if !ok {
			p.log.Warn("invalid KV event replay start sequence", "bytes", len(msg.Frames[2]))
			continue
		}
		id := msg.Frames[0]
		for _, e := range p.since(start) {
			if err := p.router.Send(p.reply(id, seqFrame(e.seq), e.payload, false)); err != nil {
				p.log.Debug("KV event replay send failed (client gone?)", "err", err)
				break
			}
		}
		if err := p.router.Send(p.reply(id, endSeq, []byte{}, true)); err != nil && p.ctx.Err() == nil {
			p.log.Debug("KV event replay END send failed (client gone?)", "err", err)
		}
	}
}

// reply builds one replay message in the configured format; the END
// marker has an empty topic and payload.
func (p *Publisher) reply(id, seq, payload []byte, end bool) zmq4.Msg {
	if p.cfg.ReplayFormat == ReplayLegacy {
		return zmq4.NewMsgFrom(id, []byte{}, seq, payload)
	}
	topic := []byte(p.cfg.Topic)
	if end {
		topic = []byte{}
	}
	return zmq4.NewMsgFrom(id, []byte{}, topic, seq, payload)
}

// Close unbinds the sockets and stops serving replay.
func (p *Publisher) Close() error {
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Shut(routerQuiet, routerShutMax); e != nil && err == nil {
			err = e
		}
	}
	<-p.done
	return err
}

// routerQuiet and routerShutMax bound the replay ROUTER's drain at Close
// (see zmtpguard.RouterSock).
const (
	routerQuiet   = 50 * time.Millisecond
	routerShutMax = time.Second
)
