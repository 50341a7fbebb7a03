package replica

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/router"
)

// register exports the sync's counters on reg.
func (s *Sync) register(reg *prometheus.Registry) error {
	counter := func(name, help string, labels prometheus.Labels, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "kvrouter_replica_" + name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(f()) })
	}
	st := func(f func(CoreStats) uint64) func() uint64 {
		return func() uint64 { return f(s.core.Stats()) }
	}
	cs := []prometheus.Collector{
		counter("events_published_total", "Lifecycle events this router published to its replicas.", nil, s.published.Load),
		counter("events_dropped_total", "Lifecycle events dropped because the outgoing queue was full.", nil, s.dropped.Load),
		counter("publish_errors_total", "Lifecycle events the NATS client refused to publish.", nil, s.pubErrs.Load),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "applied"}, st(func(c CoreStats) uint64 { return c.Applied })),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "unapplied"}, st(func(c CoreStats) uint64 { return c.Unapplied })),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "own"}, st(func(c CoreStats) uint64 { return c.Own })),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "departed"}, st(func(c CoreStats) uint64 { return c.FromDeparted })),
		counter("unannounced_refused_total", "Lifecycle events, snapshots and snapshot claims refused because their router id has no live membership record.", nil, st(func(c CoreStats) uint64 { return c.Unannounced })),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "malformed"}, s.badMsgs.Load),
		counter("peer_bookings_freed_total", "Bookings freed because the replica that made them went away.", nil, st(func(c CoreStats) uint64 { return c.PeerFreed })),
		counter("events_received_total", "Peers' lifecycle events received, by result.", prometheus.Labels{"result": "stale"}, st(func(c CoreStats) uint64 { return c.Stale })),
		counter("stream_gaps_total", "Holes detected in peers' event streams (lost lifecycle events).", nil, st(func(c CoreStats) uint64 { return c.Gaps })),
		counter("snapshot_bookings_total", "Bookings learnt from peers' snapshots (at start and when reconciling).", nil, st(func(c CoreStats) uint64 { return c.SnapshotApplied })),
		counter("resync_freed_total", "Peers' bookings freed because the peer's snapshot no longer had them (lost Free).", nil, st(func(c CoreStats) uint64 { return c.ResyncFreed })),
		counter("local_dropped_total", "This router's bookings it dropped without a Free (worker removed, expired), then freed on the peers.", nil, st(func(c CoreStats) uint64 { return c.LocalDropped })),
		counter("resync_failures_total", "Peer snapshot fetches after start that failed.", nil, s.resyncFails.Load),
		counter("shadows_total", "Anti-herding shadow bookings, by outcome.", prometheus.Labels{"outcome": "booked"}, st(func(c CoreStats) uint64 { return c.ShadowsBooked })),
		counter("shadows_total", "Anti-herding shadow bookings, by outcome.", prometheus.Labels{"outcome": "replaced"}, st(func(c CoreStats) uint64 { return c.ShadowsReplaced })),
		counter("shadows_total", "Anti-herding shadow bookings, by outcome.", prometheus.Labels{"outcome": "expired"}, st(func(c CoreStats) uint64 { return c.ShadowsExpired })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvrouter_replica_peers", Help: "Live peer replicas."},
			func() float64 { return float64(len(s.core.Peers())) }),
	}
	if st, ok := s.r.(interface{ Stats() router.Stats }); ok {
		cs = append(cs, counter("unknown_model_total", "Peers' lifecycle events (and snapshot entries) for a model this router has no pool for, dropped (also counted as unapplied).", nil,
			func() uint64 { return st.Stats().RemoteUnknownModel }))
	}
	for _, why := range resyncReasons {
		cs = append(cs, counter("resyncs_total", "Peer snapshots fetched after start to reconcile bookings, by reason.", prometheus.Labels{"reason": why}, s.resyncs[why].Load))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering replica metrics: %w", err)
		}
	}
	return nil
}
