package registry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// HeartbeatMetrics counts the heartbeats of a process's leases that
// failed and the retries that followed, by bucket. A nil
// *HeartbeatMetrics counts nothing.
type HeartbeatMetrics struct {
	failures *prometheus.CounterVec
	retries  *prometheus.CounterVec
}

// NewHeartbeatMetrics creates the counters and registers them on reg (nil:
// not exported); give it to every bucket with CountHeartbeats. On a reg
// that has them already (another owner in the same process), it counts on
// those.
func NewHeartbeatMetrics(reg *prometheus.Registry) (*HeartbeatMetrics, error) {
	m := &HeartbeatMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_registry_heartbeat_failures_total",
			Help: "Heartbeat puts of this process's registrations that failed, by bucket (each is retried within a second)."}, []string{"bucket"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_registry_heartbeat_retries_total",
			Help: "Heartbeat puts made as retries after a failed one, by bucket."}, []string{"bucket"}),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.failures, &m.retries} {
			if err := reg.Register(*c); err != nil {
				var have prometheus.AlreadyRegisteredError
				if !errors.As(err, &have) {
					return nil, err
				}
				v, ok := have.ExistingCollector.(*prometheus.CounterVec)
				if !ok {
					return nil, err
				}
				*c = v
			}
		}
	}
	return m, nil
}

func (m *HeartbeatMetrics) failed(bucket string) {
	if m != nil {
		m.failures.WithLabelValues(bucket).Inc()
	}
}

func (m *HeartbeatMetrics) retried(bucket string) {
	if m != nil {
		m.retries.WithLabelValues(bucket).Inc()
	}
}

// CountHeartbeats makes the bucket's leases, current and future, count
// their failed heartbeats and retries on m.
func (b *Bucket[T]) CountHeartbeats(m *HeartbeatMetrics) { b.hb.Store(m) }

// CountHeartbeats makes the registry's leases count their failed
// heartbeats and retries on m.
func (r *Registry) CountHeartbeats(m *HeartbeatMetrics) { r.b.CountHeartbeats(m) }
