package replica

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// register exports the session-sharing counters on reg.
func (s *Sessions) register(reg *prometheus.Registry) error {
	const sent, recv = "kvrouter_replica_session_bindings_sent_total", "kvrouter_replica_session_bindings_received_total"
	const sentHelp = "This router's session-affinity bindings shared with its replicas, by result (published, dropped: queue full or publish refused)."
	const recvHelp = "Peers' session-affinity bindings received, by result (learned; known: the session was bound here already; refused: not a live replica; malformed)."
	counter := func(name, help, result string, f func() uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"result": result}},
			func() float64 { return float64(f()) })
	}
	for _, c := range []prometheus.Collector{
		counter(sent, sentHelp, "published", s.published.Load),
		counter(sent, sentHelp, "dropped", s.dropped.Load),
		counter(recv, recvHelp, "learned", s.learned.Load),
		counter(recv, recvHelp, "known", s.known.Load),
		counter(recv, recvHelp, "refused", s.refused.Load),
		counter(recv, recvHelp, "malformed", s.bad.Load),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering session sharing metrics: %w", err)
		}
	}
	return nil
}
