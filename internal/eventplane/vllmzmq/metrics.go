package vllmzmq

import (
	"github.com/kvrouter/kvrouter/internal/kvevent/vllm"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the subscribers' Prometheus collectors, labelled by worker id
// and dp rank. One Metrics is shared by every subscriber of a process; a
// nil *Metrics records nothing.
type Metrics struct {
	batches    *prometheus.CounterVec
	applied    *prometheus.CounterVec
	refused    *prometheus.CounterVec
	malformed  *prometheus.CounterVec
	gaps       *prometheus.CounterVec
	replays    *prometheus.CounterVec
	clears     *prometheus.CounterVec
	duplicates *prometheus.CounterVec
	recvErrors *prometheus.CounterVec
	frames     *prometheus.CounterVec
	lastSeq    *prometheus.GaugeVec
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg *prometheus.Registry) (*Metrics, error) {
	wr := []string{"worker", "dp_rank"}
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvrouter", Subsystem: "vllm_events",
			Name: name, Help: help}, append(append([]string{}, wr...), extra...))
	}
	m := &Metrics{
		batches:    counter("batches_total", "KV event batches received in sequence and decoded."),
		applied:    counter("events_applied_total", "KV events passed on to the index."),
		refused:    counter("events_refused_total", "KV events dropped by the decoder, by reason.", "reason"),
		malformed:  counter("batches_malformed_total", "Payloads that were not a KV event batch (the worker rank is cleared)."),
		gaps:       counter("gaps_total", "Sequence gaps detected on the live stream."),
		replays:    counter("replays_total", "Replay requests, by result (ok, failed).", "result"),
		clears:     counter("clears_total", "Times the worker rank was cleared by the subscriber, by cause (gap, restart, malformed).", "cause"),
		duplicates: counter("duplicates_total", "Batches dropped as already applied (same sequence and payload)."),
		recvErrors: counter("receive_errors_total", "Receive errors on the SUB socket (publisher went away, or a handshake failed; the subscriber redials)."),
		frames:     counter("frames_refused_total", "Connections to the publisher (SUB or replay) dropped because a frame announced more than the frame size cap, or the handshake did not finish in time."),
		lastSeq: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kvrouter", Subsystem: "vllm_events",
			Name: "last_sequence", Help: "Last applied batch sequence number."}, wr),
	}
	for _, c := range []prometheus.Collector{m.batches, m.applied, m.refused, m.malformed, m.gaps, m.replays,
		m.clears, m.duplicates, m.recvErrors, m.frames, m.lastSeq} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// rankMetrics are one subscriber's children of the shared vectors.
type rankMetrics struct {
	batches, applied, malformed, gaps, duplicates, recvErrors prometheus.Counter
	framesRefused                                             prometheus.Counter
	replayOK, replayFailed                                    prometheus.Counter
	clearGap, clearRestart, clearMalformed                    prometheus.Counter
	refused                                                   map[vllm.Reason]prometheus.Counter
	lastSeq                                                   prometheus.Gauge
}

func (m *Metrics) forWorker(worker, rank string) rankMetrics {
	if m == nil {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "unregistered"})
		wm := rankMetrics{refused: map[vllm.Reason]prometheus.Counter{}, lastSeq: g}
		for _, c := range []*prometheus.Counter{&wm.batches, &wm.applied, &wm.malformed, &wm.gaps, &wm.duplicates,
			&wm.recvErrors, &wm.framesRefused, &wm.replayOK, &wm.replayFailed, &wm.clearGap, &wm.clearRestart, &wm.clearMalformed} {
			*c = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
		}
		for _, r := range vllm.Reasons {
			wm.refused[r] = prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
		}
		return wm
	}
	wm := rankMetrics{
		batches: m.batches.WithLabelValues(worker, rank), applied: m.applied.WithLabelValues(worker, rank),
		malformed: m.malformed.WithLabelValues(worker, rank), gaps: m.gaps.WithLabelValues(worker, rank),
		duplicates: m.duplicates.WithLabelValues(worker, rank), recvErrors: m.recvErrors.WithLabelValues(worker, rank),
		framesRefused: m.frames.WithLabelValues(worker, rank),
		replayOK:      m.replays.WithLabelValues(worker, rank, "ok"), replayFailed: m.replays.WithLabelValues(worker, rank, "failed"),
		clearGap: m.clears.WithLabelValues(worker, rank, "gap"), clearRestart: m.clears.WithLabelValues(worker, rank, "restart"),
		clearMalformed: m.clears.WithLabelValues(worker, rank, "malformed"),
		refused:        map[vllm.Reason]prometheus.Counter{},
		lastSeq:        m.lastSeq.WithLabelValues(worker, rank),
	}
	for _, r := range vllm.Reasons {
		wm.refused[r] = m.refused.WithLabelValues(worker, rank, r.String())
	}
	return wm
}
