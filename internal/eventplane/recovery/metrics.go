package recovery

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the event plane's router-side counters. A nil *Metrics
// records nothing.
type Metrics struct {
	received   *prometheus.CounterVec
	applied    prometheus.Counter
	duplicates prometheus.Counter
	gaps       prometheus.Counter
	restarts   prometheus.Counter
	recoveries *prometheus.CounterVec
	dumpEvents prometheus.Counter
	malformed  prometheus.Counter
	frames     prometheus.Counter
	drops      *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them on reg (nil: not
// exported). transport labels events_received ("nats", "zmq", "jetstream").
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	m := &Metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_eventplane_events_received_total",
			Help: "KV events received from the event plane, by transport."}, []string{"transport"}),
		applied: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_events_applied_total",
			Help: "KV events applied to the index (live, recovered and dumped)."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_duplicates_dropped_total",
			Help: "KV events dropped because their id was at or below the last applied one."}),
		gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_gaps_total",
			Help: "Gaps found in event ids (each starts a range recovery)."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_publisher_restarts_total",
			Help: "Publisher restarts detected (new publisher id, ids starting over, TooNew)."}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_eventplane_recoveries_total",
			Help: "Recovery query outcomes by kind: events, tree_dump, too_new, invalid_range, error, failed."}, []string{"kind"}),
		dumpEvents: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_dump_events_total",
			Help: "Stored events replayed from tree dumps."}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_malformed_total",
			Help: "Event-plane messages that could not be decoded."}),
		frames: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_eventplane_frames_refused_total",
			Help: "ZMQ connections to workers dropped because a frame announced more than the frame size cap, or the handshake did not finish in time."}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_eventplane_events_dropped_total",
			Help: "KV events dropped before recovery because their worker rank is not followed, by reason: unknown_worker (not registered or listed, or removed), removed_worker, unknown_limit."},
			[]string{"reason"}),
	}
	for _, r := range []string{"unknown_worker", "removed_worker", "unknown_limit"} {
		m.drops.WithLabelValues(r) // exported at 0 before the first drop
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.received, m.applied, m.duplicates, m.gaps, m.restarts, m.recoveries, m.dumpEvents, m.malformed, m.frames, m.drops} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Received returns the received-events counter of a transport (nil
// Metrics: a counter that is never exported), to be kept by the caller.
func (m *Metrics) Received(transport string) prometheus.Counter {
	if m == nil {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "unused"})
	}
	return m.received.WithLabelValues(transport)
}

// Malformed counts one undecodable message.
func (m *Metrics) Malformed() {
	if m != nil {
		m.malformed.Inc()
	}
}

// FrameRefused counts one connection dropped for an oversized frame.
func (m *Metrics) FrameRefused() {
	if m != nil {
		m.frames.Inc()
	}
}

func (m *Metrics) dropped(reason string) {
	if m != nil {
		m.drops.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) step(st Step) {
	if m == nil {
		return
	}
	if len(st.Apply) > 0 {
		m.applied.Add(float64(len(st.Apply)))
	}
	if st.Dropped > 0 {
		m.duplicates.Add(float64(st.Dropped))
	}
	if st.Gap {
		m.gaps.Inc()
	}
	if st.Restart {
		m.restarts.Inc()
	}
}

func (m *Metrics) recovery(kind string, dumped int) {
	if m == nil {
		return
	}
	m.recoveries.WithLabelValues(kind).Inc()
	m.dumpEvents.Add(float64(dumped))
}
