package zmqevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmtpguard"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
)

// Topic is the first frame of every live event message.
const Topic = "kv-events"

// zmqLogger silences zmq4's own logging.
var zmqLogger = log.New(io.Discard, "", 0)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Endpoint is where the PUB socket binds ("tcp://*:5600";
	// "tcp://127.0.0.1:0" picks a free port). Required.
	Endpoint string
	// QueryEndpoint is where the ROUTER socket answering recovery queries
	// binds. Required.
	QueryEndpoint string
	// Bare publishes bare RouterEvents instead of enveloped ones. Default
	// false.
	Bare bool
	// PartBytes is the size recovery replies are cut at. Default
	// recovery.DefaultPartBytes.
	PartBytes int
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
	// MaxFrameBytes caps the size a subscriber or asker may announce for
	// one ZMTP frame (they send only subscriptions and recovery requests);
	// a larger announcement drops its connection before anything is
	// allocated for it. 0 means zmtpguard.DefaultMaxRequestBytes (64 KiB).
	MaxFrameBytes int
}

// Publisher is a worker process's end: PUB for live events, ROUTER for
// recovery queries of any of its ranks.
type Publisher struct {
	cfg    PublisherConfig
	log    *slog.Logger
	id     uint64
	ctx    context.Context
	cancel context.CancelFunc
	pub    zmq4.Socket
	router *zmtpguard.RouterSock
	done   chan struct{}

	mu   sync.Mutex
	seq  uint64
	recs map[kvevent.WorkerRank]localindex.Recovery
}

// NewPublisher binds both sockets and starts answering queries.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Endpoint == "" || cfg.QueryEndpoint == "" {
		return nil, errors.New("zmqevents: endpoint and query endpoint are required")
	}
	if cfg.MaxFrameBytes < 0 {
		return nil, fmt.Errorf("zmqevents: max frame bytes %d is negative", cfg.MaxFrameBytes)
	}
	if cfg.PartBytes <= 0 {
		cfg.PartBytes = recovery.DefaultPartBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{cfg: cfg, log: cfg.Logger, id: recovery.NewPublisherID(), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), recs: map[kvevent.WorkerRank]localindex.Recovery{}}
	guard := zmtpguard.Options{MaxFrameBytes: zmtpguard.Cap(cfg.MaxFrameBytes, zmtpguard.DefaultMaxRequestBytes),
		Refused: zmtpguard.LogRefusals(p.log, "event publisher "+cfg.Endpoint, nil)}
	pubGuard := guard
	pubGuard.MaxConnBytes = zmtpguard.DefaultMaxSubscriberBytes
	p.pub = zmq4.NewPub(zmtpguard.WithOptions(ctx, pubGuard), zmq4.WithLogger(zmqLogger))
	if err := p.pub.Listen(zmtpguard.Endpoint(cfg.Endpoint)); err != nil {
		cancel()
		_ = p.pub.Close()
		return nil, fmt.Errorf("binding event publisher on %s: %w", cfg.Endpoint, err)
	}
	p.router = zmtpguard.NewRouterSock(guard, func(sctx context.Context) zmq4.Socket {
		return zmq4.NewRouter(sctx, zmq4.WithLogger(zmqLogger))
	})
	if err := p.router.Listen(zmtpguard.Endpoint(cfg.QueryEndpoint)); err != nil {
		cancel()
		_ = p.pub.Close()
		_ = p.router.Shut(0, 0)
		return nil, fmt.Errorf("binding recovery socket on %s: %w", cfg.QueryEndpoint, err)
	}
	go p.serve()
	return p, nil
}

// Endpoint returns the dialable PUB endpoint.
func (p *Publisher) Endpoint() string { return bound(p.pub, p.cfg.Endpoint) }

// QueryEndpoint returns the dialable ROUTER endpoint.
func (p *Publisher) QueryEndpoint() string { return bound(p.router, p.cfg.QueryEndpoint) }

// ID returns the envelope publisher id.
func (p *Publisher) ID() uint64 { return p.id }

func bound(s zmq4.Socket, configured string) string {
	ta, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		return configured
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "tcp://" + net.JoinHostPort(host, strconv.Itoa(ta.Port))
}

// Serve answers queries for worker rank w from rec (it never fails; the
// error is there to match natsevents.Publisher).
func (p *Publisher) Serve(w kvevent.WorkerRank, rec localindex.Recovery) error {
	p.mu.Lock()
	p.recs[w] = rec
	p.mu.Unlock()
	return nil
}

// Publish sends each (stamped) event as one message, in order.
func (p *Publisher) Publish(evs []kvevent.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range evs {
		var b []byte
		var err error
		if p.cfg.Bare {
			b, err = dynamo.EncodeEvent(ev)
		} else {
			p.seq++
			now := time.Now()
			b, err = dynamo.EncodeEventInEnvelope(dynamo.Envelope{Topic: dynamo.KVEventTopic, PublisherID: p.id, Sequence: p.seq,
				PublishedAtMs: uint64(now.UnixMilli()), PublishedAtNs: uint64(now.UnixNano())}, ev)
		}
		if err != nil {
			return err
		}
		if err := p.pub.Send(zmq4.NewMsgFrom([]byte(Topic), b)); err != nil {
			return fmt.Errorf("publishing event %d of %v: %w", ev.ID, ev.Worker, err)
		}
	}
	return nil
}

func (p *Publisher) serve() {
	defer close(p.done)
	for {
		msg, err := p.router.Recv()
		if err != nil {
			if p.ctx.Err() != nil {
				return
			}
			continue
		}
		if len(msg.Frames) < 2 {
			continue
		}
		id := msg.Frames[0]
		var rep recovery.Reply
		req, err := recovery.DecodeRequest(msg.Frames[len(msg.Frames)-1])
		if err != nil {
			rep = recovery.Reply{Kind: recovery.KindError, Err: err.Error()}
		} else {
			p.mu.Lock()
			rec := p.recs[req.Worker]
			p.mu.Unlock()
			if rec == nil {
				rep = recovery.Reply{Kind: recovery.KindError, Err: fmt.Sprintf("no worker rank %v here", req.Worker)}
			} else {
				rep = recovery.Answer(req.Worker, rec, req)
			}
		}
		rep.PublisherID = p.id
		parts, err := recovery.EncodeReply(rep, p.cfg.PartBytes)
		if err != nil {
			parts, _ = recovery.EncodeReply(recovery.Reply{Kind: recovery.KindError, Err: err.Error()}, 0)
		}
		for _, b := range parts {
			if err := p.router.Send(zmq4.NewMsgFrom(id, b)); err != nil {
				p.log.Debug("recovery reply failed (asker gone?)", "err", err)
				break
			}
		}
	}
}

// routerQuiet and routerShutMax bound the ROUTER's drain at Close (see
// zmtpguard.RouterSock).
const (
	routerQuiet   = 50 * time.Millisecond
	routerShutMax = time.Second
)

// Close unbinds both sockets.
func (p *Publisher) Close() error {
	p.cancel()
	err := errors.Join(p.pub.Close(), p.router.Shut(routerQuiet, routerShutMax))
	<-p.done
	return err
}
