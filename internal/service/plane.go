package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/eventplane/durable"
	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/liveindex"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// source is where the service reads one worker's KV events from.
type source uint8

const (
	// sourceNone: no events; the worker is routed in approximate mode.
	sourceNone source = iota
	// sourceEngine: the engine's own vLLM-format ZMQ stream (vllmzmq).
	sourceEngine
	// sourcePlane: RouterEvents on the event plane (NATS, durable stream
	// or RouterEvents over ZMQ), followed by a recovery tracker.
	sourcePlane
)

// sourceOf decides where rec's events come from under the configured
// event plane; why explains a worker left in approximate mode although it
// declares events.
func (s *Service) sourceOf(rec fleet.WorkerRecord, origin fleet.Origin) (src source, why string) {
	plane := s.cfg.EventPlane.Kind
	switch {
	case s.cfg.Router.NoKVEvents || rec.Events.Kind == fleet.EventsNone || rec.Events.Kind == "":
		return sourceNone, ""
	case rec.Events.Kind == fleet.EventsZMQ && plane == config.PlaneZMQ:
		return sourcePlane, ""
	case rec.Events.Kind == fleet.EventsZMQ && origin == fleet.OriginStatic:
		return sourceEngine, ""
	case rec.Events.Kind == fleet.EventsZMQ:
		return sourceNone, "a registered worker's engine ZMQ stream is not read (run kvrouter agent next to it, or list it with --worker)"
	case rec.Events.Kind == fleet.EventsNATS && plane == config.PlaneNATS:
		return sourcePlane, ""
	default:
		return sourceNone, fmt.Sprintf("the worker publishes on the NATS event plane but this router runs --event-plane %s", plane)
	}
}

// The durable consumer snapshots the index itself (its events go through
// the durable transport's applier, as every transport's do).
var _ durable.Snapshotter = (*liveindex.Index)(nil)

// newPlane builds the event plane's consumers (nothing runs until
// startPlane).
func (s *Service) newPlane() error {
	ep := s.cfg.EventPlane
	onState := func(id kvevent.WorkerID, st fleet.State, why string) { s.workers.planeState(id, st, why) }
	var err error
	switch {
	case ep.Kind == config.PlaneNATS && ep.Durable:
		s.dur, err = durable.New(s.cfg.DurableConfig(s.cfg.Router.ID), s.bus.JetStream(), s.workers.applier(transportDurable), s.idx,
			onState, s.reg, s.log.With("component", "durable"))
	case ep.Kind == config.PlaneNATS:
		cc := natsevents.DefaultConsumerConfig()
		cc.Namespace, cc.Component = ep.Namespace, ep.Component
		cc.Recovery.QueryTimeout = max(cc.Recovery.QueryTimeout, s.cfg.Events.ReplayTimeout)
		s.natsC, err = natsevents.NewConsumer(cc, s.bus.Conn(), s.workers.applier(transportNATS), onState, s.reg, s.log.With("component", "eventplane"))
	case ep.Kind == config.PlaneZMQ:
		zc := zmqevents.DefaultConsumerConfig()
		zc.DialRetry = s.cfg.Events.DialRetry
		s.zmqC, err = zmqevents.NewConsumer(zc, s.workers.applier(transportZMQ), onState, s.reg, s.log.With("component", "eventplane"))
	}
	if err != nil {
		return fmt.Errorf("building the event plane: %w", err)
	}
	return nil
}

// startPlane starts consuming the event plane, hands it the static
// workers, and (NATS) starts following the worker registry on the
// returned goroutine func, which ends with ctx.
//
// Every NATS step is retried (Service.retry) until it succeeds or ctx
// ends: a NATS server restarting during start-up delays readiness, it
// does not end the process.
func (s *Service) startPlane(ctx context.Context) (follow func(), err error) {
	if s.bus != nil {
		if err := s.waitConnected(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.startConsumer(ctx); err != nil {
		return nil, err
	}
	for _, n := range s.staticNotes {
		s.notifyPlane(n)
	}
	if s.rs != nil {
		if err := s.startReplica(ctx); err != nil {
			return nil, err
		}
	}
	if s.bus == nil {
		s.regSynced.Store(true)
		return nil, nil
	}
	return s.followRegistry(ctx)
}

// waitConnected waits for the NATS connection to be up.
func (s *Service) waitConnected(ctx context.Context) error {
	return s.retry(ctx, "connection", "waiting for the NATS connection", func(context.Context) error {
		if st := s.bus.Conn().Status(); st != nats.CONNECTED {
			return fmt.Errorf("connection %s", strings.ToLower(st.String()))
		}
		return nil
	})
}

// startConsumer starts the NATS event consumer (recovering every worker
// rank on each reconnect) or the durable one.
func (s *Service) startConsumer(ctx context.Context) error {
	switch {
	case s.natsC != nil:
		if err := s.natsC.Start(); err != nil {
			// Subscribing fails only on a closed connection: this is the
			// flush, and the client sends the subscription again on
			// reconnect.
			s.log.Warn("KV event subscription not confirmed by NATS yet; the client sends it again on reconnect", "err", err)
		}
		s.unhook = s.bus.OnReconnect(s.natsC.Reconnected)
	case s.dur != nil:
		return s.retry(ctx, "durable", "starting the durable KV event consumer", s.dur.Start)
	}
	return nil
}

// startReplica starts replica sync (the peers' snapshots first), building
// it anew after a failed start tore it down.
func (s *Service) startReplica(ctx context.Context) error {
	tried := false
	return s.retry(ctx, "replica", "starting replica sync", func(ctx context.Context) error {
		if tried { // a failed start tore the last one down
			if err := s.newReplica(); err != nil {
				return err
			}
		}
		tried = true
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.rs.Start(sctx); err != nil {
			return err
		}
		if err := s.startSessions(); err != nil {
			// Advisory: replicas then keep their own bindings.
			s.log.Warn("session affinity bindings not shared with the replicas", "err", err)
		}
		return nil
	})
}

// followRegistry opens and watches the worker registry and returns the
// goroutine func that folds its changes into the directory until ctx
// ends.
func (s *Service) followRegistry(ctx context.Context) (follow func(), err error) {
	var reg *registry.Registry
	err = s.retry(ctx, "registry", "opening the worker registry", func(ctx context.Context) error {
		var err error
		rc := s.cfg.EventPlane.Registry
		rc.Replicas = s.cfg.EventPlane.NATS.Replicas
		reg, err = registry.OpenRegistry(ctx, s.bus.JetStream(), rc, s.log.With("component", "registry"))
		return err
	})
	if err != nil {
		return nil, err
	}
	var w *registry.Watcher[fleet.WorkerRecord]
	err = s.retry(ctx, "watch", "watching the worker registry", func(ctx context.Context) error {
		var err error
		w, err = reg.Watch(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return func() {
		defer w.Stop()
		registry.Follow(ctx, s.dir, w, s.onNote, func() {
			s.regSynced.Store(true)
			s.log.Info("worker registry synced", "bucket", reg.Bucket().Name())
		})
	}, nil
}

// onNote folds one registry notification in: the router's worker set, the
// service's states and the event plane.
func (s *Service) onNote(n fleet.Notification) {
	rec := n.Worker.Record
	switch n.Kind {
	case fleet.Added:
		if err := s.addWorker(rec, n.Worker.Origin); err != nil {
			s.log.Warn("registered worker not added", "worker", rec.Name, "err", err)
			return
		}
		s.log.Debug("registered worker added", "worker", rec.Name, "worker_id", uint64(rec.ID), "url", rec.URL, "events", string(rec.Events.Kind))
	case fleet.Removed:
		s.notifyPlane(n) // drops its blocks first
		if err := s.pools.RemoveWorker(rec.ID); err != nil {
			s.log.Warn("removing worker", "worker", rec.Name, "err", err)
		}
		s.workers.remove(rec.ID)
		s.adapters.forget(rec.ID)
		s.log.Info("worker deregistered or expired: removed, its blocks dropped", "worker", rec.Name, "worker_id", uint64(rec.ID))
		return
	case fleet.Updated:
		// Capacity, ranks or URL may have changed; the event source is
		// the one the worker was added with.
		src, _ := s.sourceOf(rec, n.Worker.Origin)
		if err := s.pools.AddWorker(rec.Model, workerInfo(rec, src)); err != nil {
			s.log.Warn("updated worker record not applied", "worker", rec.Name, "err", err)
		}
		s.workers.updated(rec)
	}
	s.notifyPlane(n)
}

// notifyPlane hands a notification to the event plane's consumer.
func (s *Service) notifyPlane(n fleet.Notification) {
	if n.Kind != fleet.Removed {
		if src, _ := s.sourceOf(n.Worker.Record, n.Worker.Origin); src != sourcePlane {
			return
		}
	}
	switch {
	case s.natsC != nil:
		s.natsC.Notify(n)
	case s.zmqC != nil:
		s.zmqC.Notify(n)
	case s.dur != nil:
		s.dur.Notify(n)
	}
}

// closePlane stops the event plane's consumers. Idempotent.
func (s *Service) closePlane() { s.planeOnce.Do(s.closePlaneOnce) }

func (s *Service) closePlaneOnce() {
	if s.unhook != nil {
		s.unhook()
	}
	if s.natsC != nil {
		if err := s.natsC.Close(); err != nil {
			s.log.Debug("closing the KV event subscription", "err", err)
		}
	}
	if s.zmqC != nil {
		_ = s.zmqC.Close()
	}
	if s.dur != nil {
		s.dur.Close()
	}
}
