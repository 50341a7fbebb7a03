package natsevents

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/eventplane/localindex"
	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/kvevent/dynamo"
	"github.com/nats-io/nats.go"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Namespace and Component name the subjects (--namespace, --component).
	// Defaults "dynamo" and "backend".
	Namespace, Component string
	// Bare publishes bare RouterEvents instead of wrapping them in the
	// envelope. Default false (envelope, with the publisher id routers use
	// to detect a restart).
	Bare bool
	// PartBytes is the size recovery replies are cut at. Default
	// recovery.DefaultPartBytes.
	PartBytes int
	// Logger receives errors; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultPublisherConfig returns the defaults documented on the fields.
func DefaultPublisherConfig() PublisherConfig {
	return PublisherConfig{Namespace: dynamo.DefaultNamespace, Component: dynamo.DefaultComponent, PartBytes: recovery.DefaultPartBytes}
}

// Publisher publishes one worker process's RouterEvents and answers
// recovery queries for its ranks. It is safe for concurrent use.
type Publisher struct {
	cfg     PublisherConfig
	conn    *nats.Conn
	subject string
	id      uint64
	log     *slog.Logger

	mu   sync.Mutex
	seq  uint64
	subs []*nats.Subscription
}

// NewPublisher returns a publisher on conn with a fresh random publisher id.
func NewPublisher(cfg PublisherConfig, conn *nats.Conn) (*Publisher, error) {
	if cfg.Namespace == "" || cfg.Component == "" {
		return nil, errors.New("natsevents: namespace and component are required")
	}
	if cfg.PartBytes <= 0 {
		cfg.PartBytes = recovery.DefaultPartBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{cfg: cfg, conn: conn, subject: dynamo.Subject(cfg.Namespace, cfg.Component),
		id: recovery.NewPublisherID(), log: cfg.Logger}, nil
}

// ID returns the publisher id written in every envelope.
func (p *Publisher) ID() uint64 { return p.id }

// Subject returns the events subject.
func (p *Publisher) Subject() string { return p.subject }

// Publish sends each event as one message, in order. The events must
// already carry their worker rank and event id (a local indexer stamps
// them).
func (p *Publisher) Publish(evs []kvevent.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range evs {
		b, err := p.encode(ev)
		if err != nil {
			return err
		}
		if err := p.conn.Publish(p.subject, b); err != nil {
			return fmt.Errorf("publishing event %d of %v: %w", ev.ID, ev.Worker, err)
		}
	}
	return nil
}

func (p *Publisher) encode(ev kvevent.Event) ([]byte, error) {
	if p.cfg.Bare {
		return dynamo.EncodeEvent(ev)
	}
	p.seq++
	now := time.Now()
	return dynamo.EncodeEventInEnvelope(dynamo.Envelope{Topic: dynamo.KVEventTopic, PublisherID: p.id, Sequence: p.seq,
		PublishedAtMs: uint64(now.UnixMilli()), PublishedAtNs: uint64(now.UnixNano())}, ev)
}

// Serve answers recovery queries for worker rank w from rec until Close.
func (p *Publisher) Serve(w kvevent.WorkerRank, rec localindex.Recovery) error {
	subj := QuerySubject(p.cfg.Namespace, p.cfg.Component, w)
	sub, err := p.conn.Subscribe(subj, func(m *nats.Msg) {
		if m.Reply == "" {
			return
		}
		var rep recovery.Reply
		req, err := recovery.DecodeRequest(m.Data)
		if err != nil {
			rep = recovery.Reply{Kind: recovery.KindError, Err: err.Error()}
		} else {
			rep = recovery.Answer(w, rec, req)
		}
		rep.PublisherID = p.id
		parts, err := recovery.EncodeReply(rep, p.cfg.PartBytes)
		if err != nil {
			parts, _ = recovery.EncodeReply(recovery.Reply{Kind: recovery.KindError, Err: err.Error()}, 0)
		}
		for _, b := range parts {
			if err := p.conn.Publish(m.Reply, b); err != nil {
				p.log.Warn("recovery reply failed", "worker", w.String(), "err", err)
				return
			}
		}
		p.log.Debug("recovery query answered", "worker", w.String(), "request", req.String(), "kind", rep.Kind.String(),
			"events", len(rep.Events), "parts", len(parts))
	})
	if err != nil {
		return fmt.Errorf("serving recovery on %s: %w", subj, err)
	}
	p.mu.Lock()
	p.subs = append(p.subs, sub)
	p.mu.Unlock()
	return nil
}

// Close stops answering queries (the connection stays open). It flushes
// pending events first.
func (p *Publisher) Close() error {
	p.mu.Lock()
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	var err error
	for _, s := range subs {
		err = errors.Join(err, s.Unsubscribe())
	}
	if !p.conn.IsClosed() {
		_ = p.conn.FlushTimeout(time.Second)
	}
	return err
}
