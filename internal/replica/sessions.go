package replica

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mpack"
	"github.com/kvrouter/kvrouter/internal/natsbus"
)

// MaxSessionID is the longest session id a binding may carry, in bytes.
const MaxSessionID = 256

// SessionsSubject is the subject replicas share session-affinity
// bindings on: "namespace.{ns}.component.{comp}.session_affinity". It is
// apart from the lifecycle events, so a peer that does not know it (an
// older kvrouter, Dynamo) is not disturbed.
func SessionsSubject(namespace, component string) string {
	return "namespace." + namespace + ".component." + component + ".session_affinity"
}

// Binding says that router RouterID sent session Session's last request
// to Worker.
type Binding struct {
	// RouterID is the router that bound the session.
	RouterID uint64
	// Session is the client's session id.
	Session string
	// Worker is the worker rank the session's request went to.
	Worker kvevent.WorkerRank
}

// AppendBinding appends the msgpack encoding of b (a map with named
// fields: router_id, session_id, worker {worker_id, dp_rank};
// docs/events.md) to dst.
func AppendBinding(dst []byte, b Binding) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	e := msgpack.NewEncoder(&buf)
	var err error
	keep := func(e error) {
		if e != nil {
			err = e
		}
	}
	keep(e.EncodeMapLen(3))
	keep(e.EncodeString("router_id"))
	keep(e.EncodeUint(b.RouterID))
	keep(e.EncodeString("session_id"))
	keep(e.EncodeString(b.Session))
	keep(e.EncodeString("worker"))
	encodeWorker(e, keep, b.Worker)
	if err != nil {
		return dst, fmt.Errorf("encoding session binding: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeBinding decodes a binding: unknown fields are skipped; router_id,
// a non-empty session_id of at most MaxSessionID bytes and worker are
// required. Errors wrap ErrMalformed.
func DecodeBinding(p []byte) (Binding, error) {
	var b Binding
	d := mpack.NewDecoder(p)
	n, err := d.MapLen()
	if err != nil {
		return b, fmt.Errorf("%w: session binding: %w", ErrMalformed, err)
	}
	var haveRouter, haveWorker bool
	for range n {
		k, err := d.DecodeString()
		if err != nil {
			return b, fmt.Errorf("%w: session binding key: %w", ErrMalformed, err)
		}
		switch k {
		case "router_id":
			b.RouterID, err = d.DecodeUint64()
			haveRouter = err == nil
		case "session_id":
			if b.Session, err = d.DecodeString(); err == nil && len(b.Session) > MaxSessionID {
				err = fmt.Errorf("%d bytes, max %d", len(b.Session), MaxSessionID)
			}
		case "worker":
			b.Worker, err = decodeWorker(d)
			haveWorker = err == nil
		default:
			err = d.Skip()
		}
		if err != nil {
			return Binding{}, fmt.Errorf("%w: session binding field %q: %w", ErrMalformed, k, err)
		}
	}
	if !haveRouter || !haveWorker || b.Session == "" {
		return Binding{}, fmt.Errorf("%w: session binding without router_id, session_id or worker", ErrMalformed)
	}
	return b, nil
}

// SessionsConfig configures a Sessions.
type SessionsConfig struct {
	// Namespace and Component name the subject (SessionsSubject).
	Namespace, Component string
	// RouterID is this router's id; its own bindings coming back are
	// ignored.
	RouterID uint64
	// Member says whether a router id is a live replica: bindings of
	// any other are refused and counted (replica sync's Core.Member).
	Member func(id uint64) bool
	// Learn applies a peer's binding (the front door's LearnSession).
	Learn func(session string, w kvevent.WorkerRank) bool
	// QueueSize bounds the bindings waiting to be published; a full
	// queue drops. Default 4096.
	QueueSize int
	// Registry, when set, gets the Stats counters as
	// kvrouter_replica_session_bindings_* metrics (sessions_metrics.go).
	Registry *prometheus.Registry
}

// Sessions shares session-affinity bindings between router replicas
// over NATS: Share publishes this router's (best effort, never
// blocking), and peers' bindings are handed to Learn. Create it with
// NewSessions, then Start; Close ends it.
type Sessions struct {
	cfg SessionsConfig
	bus *natsbus.Bus
	log *slog.Logger

	q                                                chan Binding
	published, dropped, learned, refused, bad, known atomic.Uint64

	mu     sync.Mutex
	sub    *nats.Subscription
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// NewSessions builds session sharing over bus (log may be nil).
func NewSessions(cfg SessionsConfig, bus *natsbus.Bus, log *slog.Logger) (*Sessions, error) {
	if bus == nil || cfg.Member == nil || cfg.Learn == nil || cfg.RouterID == 0 {
		return nil, fmt.Errorf("%w: session sharing needs a bus, a router id, Member and Learn", ErrConfig)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 4096
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sessions{cfg: cfg, bus: bus, log: log, q: make(chan Binding, cfg.QueueSize)}
	if cfg.Registry != nil {
		if err := s.register(cfg.Registry); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Start subscribes to peers' bindings and starts publishing.
func (s *Sessions) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil || s.closed {
		return errors.New("session sharing: already started or closed")
	}
	subject := SessionsSubject(s.cfg.Namespace, s.cfg.Component)
	sub, err := s.bus.Conn().Subscribe(subject, s.onBinding)
	if err != nil {
		return fmt.Errorf("session sharing: subscribing: %w", err)
	}
	s.sub, s.stop, s.done = sub, make(chan struct{}), make(chan struct{})
	go s.publish(subject)
	return nil
}

// Share queues this router's binding of session to w for the peers;
// it never blocks (a full queue drops and counts).
func (s *Sessions) Share(session string, w kvevent.WorkerRank) {
	select {
	case s.q <- Binding{RouterID: s.cfg.RouterID, Session: session, Worker: w}:
	default:
		s.dropped.Add(1)
	}
}

func (s *Sessions) onBinding(m *nats.Msg) {
	b, err := DecodeBinding(m.Data)
	switch {
	case err != nil:
		s.bad.Add(1)
		s.log.Debug("dropping malformed session binding", "err", err)
	case b.RouterID == s.cfg.RouterID:
	case !s.cfg.Member(b.RouterID):
		s.refused.Add(1)
	case s.cfg.Learn(b.Session, b.Worker):
		s.learned.Add(1)
	default:
		s.known.Add(1)
	}
}

func (s *Sessions) publish(subject string) {
	defer close(s.done)
	nc := s.bus.Conn()
	var buf []byte
	send := func(b Binding) {
		var err error
		if buf, err = AppendBinding(buf[:0], b); err == nil {
			err = nc.Publish(subject, buf)
		}
		if err != nil {
			s.dropped.Add(1)
			return
		}
		s.published.Add(1)
	}
	for {
		select {
		case b := <-s.q:
			send(b)
		case <-s.stop:
			for {
				select {
				case b := <-s.q:
					send(b)
				default:
					return
				}
			}
		}
	}
}

// SessionStats counts what session sharing did.
type SessionStats struct {
	// Published and Dropped count this router's bindings sent and lost.
	Published, Dropped uint64
	// Learned counts peers' bindings applied; Known those not applied
	// because the session was bound here already (the first binding
	// wins); Refused those of routers that are not live replicas;
	// Malformed those that did not decode.
	Learned, Known, Refused, Malformed uint64
}

// Stats returns the counters.
func (s *Sessions) Stats() SessionStats {
	return SessionStats{Published: s.published.Load(), Dropped: s.dropped.Load(), Learned: s.learned.Load(), Known: s.known.Load(),
		Refused: s.refused.Load(), Malformed: s.bad.Load()}
}

// Close stops sharing (queued bindings are published first). Idempotent.
func (s *Sessions) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if s.stop == nil {
		return
	}
	_ = s.sub.Unsubscribe()
	close(s.stop)
	<-s.done
}
