package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/natsbus"
	"github.com/kvrouter/kvrouter/internal/replica"
)

// startupBackoffMax caps the wait between two attempts of a NATS start-up
// step; the first wait is --nats-reconnect-wait, doubled each time.
const startupBackoffMax = 10 * time.Second

// ErrStartup wraps a NATS start-up failure that retrying cannot mend: the
// server refused the credentials, TLS failed, a credentials file is
// unreadable. Run returns it and `kvrouter serve` exits with it.
var ErrStartup = errors.New("NATS start-up failed")

// startup is the NATS start-up's progress, for /ready and the logs.
type startup struct {
	done atomic.Bool // every NATS step succeeded

	mu    sync.Mutex
	state string // what start-up is doing or waiting for
}

func (st *startup) set(format string, a ...any) {
	st.mu.Lock()
	st.state = fmt.Sprintf(format, a...)
	st.mu.Unlock()
}

func (st *startup) String() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.state
}

// fatalNATS reports whether a NATS error is a misconfiguration (retrying
// will not help) rather than the server being away.
func fatalNATS(err error) bool {
	var (
		unknownCA *x509.UnknownAuthorityError
		badCert   x509.CertificateInvalidError
		badHost   x509.HostnameError
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
		pathErr   *fs.PathError
	)
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), errors.Is(err, nats.ErrNkeysNotSupported),
		errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted),
		errors.Is(err, nats.ErrClientCertOrRootCAsRequired):
		return true
	case errors.As(err, &unknownCA), errors.As(err, &badCert), errors.As(err, &badHost), errors.As(err, &verify),
		errors.As(err, &record), errors.As(err, &alert), errors.As(err, &pathErr):
		return true
	}
	// Some TLS and auth failures arrive as plain text from the server.
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "authorization violation") || strings.Contains(msg, "tls: ") ||
		strings.Contains(msg, "x509: ")
}

// retry runs one NATS start-up step until it succeeds, fails for good
// (fatalNATS: wrapped in ErrStartup) or ctx ends, waiting between attempts
// from --nats-reconnect-wait doubling up to startupBackoffMax (with a
// little jitter, so that routers restarted together do not retry in step).
// Each failure is logged, counted (by step, a short label) and shown on
// /ready (what, in words).
func (s *Service) retry(ctx context.Context, step, what string, fn func(context.Context) error) error {
	wait := s.cfg.EventPlane.NATS.ReconnectWait
	for attempt := 1; ; attempt++ {
		s.boot.set("NATS start-up: %s", what)
		err := fn(ctx)
		if err == nil {
			if attempt > 1 {
				s.log.Info("NATS start-up step succeeded after retries", "step", what, "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fatalNATS(err) {
			return fmt.Errorf("%w: %s: %w", ErrStartup, what, err)
		}
		d := wait + rand.N(wait/4+1)
		s.boot.set("NATS start-up: %s failed (attempt %d, next in %v): %v", what, attempt, d.Round(time.Millisecond), err)
		s.log.Warn("NATS start-up step failed; retrying", "step", what, "attempt", attempt, "retry_in", d, "err", err)
		s.startRetries.WithLabelValues(step).Inc()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, max(startupBackoffMax, s.cfg.EventPlane.NATS.ReconnectWait))
	}
}

// ConnectNATS connects to the external NATS server (--nats-url) now,
// retrying until it answers or ctx ends, so that a caller may use Bus
// before Run (`kvrouter up` connects its mock workers through it). It is
// a no-op when connected already or without the NATS event plane; Run
// calls it itself otherwise. Errors wrap ErrStartup or are ctx's.
func (s *Service) ConnectNATS(ctx context.Context) error {
	if s.cfg.EventPlane.Kind != config.PlaneNATS || s.bus != nil {
		return nil
	}
	if err := s.retry(ctx, "connect", "connecting to NATS at "+redactURL(s.cfg.EventPlane.NATS.URL), s.connectNATS); err != nil {
		return err
	}
	return s.buildNATSPlane()
}

// connectNATS makes one attempt at the external server: a plain TCP dial
// first (cheap, and bounded by ctx), then the NATS connection.
func (s *Service) connectNATS(ctx context.Context) error {
	if err := probeNATS(ctx, s.cfg.EventPlane.NATS.URL, s.cfg.EventPlane.NATS.ConnectTimeout); err != nil {
		return err
	}
	b, err := natsbus.Start(s.cfg.NATSConfig(), s.log.With("component", "nats"))
	if err != nil {
		return err
	}
	s.bus = b
	return nil
}

// probeNATS dials the servers of a NATS URL list until one accepts a TCP
// connection.
func probeNATS(ctx context.Context, urls string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	var errs []error
	for u := range strings.SplitSeq(urls, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		pu, err := neturl.Parse(u)
		if err != nil {
			return fmt.Errorf("NATS URL %q: %w", redactURL(u), err)
		}
		host := pu.Host
		if pu.Port() == "" {
			host = net.JoinHostPort(pu.Hostname(), "4222")
		}
		c, err := d.DialContext(ctx, "tcp", host)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// redactURL hides credentials in a NATS URL list.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// buildNATSPlane builds, once the bus exists, the NATS event plane's
// consumers and replica sync (nothing runs until startPlane).
func (s *Service) buildNATSPlane() error {
	if err := s.newPlane(); err != nil {
		return err
	}
	if s.cfg.EventPlane.ReplicaSync {
		return s.newReplica()
	}
	return nil
}

// newReplica builds replica sync over the bus, sharing every model pool. Its metrics go to a
// registry of its own, forwarded by s.replicaMetrics, so that a sync
// rebuilt after a failed start does not collide with the first one's.
func (s *Service) newReplica() error {
	pc := replica.DefaultConfig()
	pc.Namespace, pc.Component = s.cfg.EventPlane.Namespace, s.cfg.EventPlane.Component
	pc.ResyncInterval = s.cfg.EventPlane.ReplicaResyncInterval
	pc.Clock = s.clock // the router's
	pc.Replicas = s.cfg.EventPlane.NATS.Replicas
	reg := prometheus.NewRegistry()
	rs, err := replica.New(pc, s.bus, s.pools, reg, s.log.With("component", "replica"))
	if err != nil {
		return fmt.Errorf("building replica sync: %w", err)
	}
	s.rs = rs
	s.replicaMetrics.cur.Store(reg)
	return nil
}

// startNATS is the NATS event plane's start-up, run by Run next to the
// front door: connect (external server), subscribe, start the durable
// consumer and replica sync, open and watch the worker registry, each
// step retried until it succeeds or ctx ends; then it follows the
// registry until ctx ends. It returns ctx's error, or an ErrStartup error
// for a misconfiguration.
func (s *Service) startNATS(ctx context.Context) error {
	if err := s.ConnectNATS(ctx); err != nil {
		return err
	}
	follow, err := s.startPlane(ctx)
	if err != nil {
		return err
	}
	s.boot.done.Store(true)
	s.boot.set("")
	follow()
	return nil
}

// forwardCollector exports whatever the registry it currently points at
// gathers (counters and gauges): replica sync's metrics, whose registry
// is replaced when replica sync is rebuilt.
type forwardCollector struct {
	cur atomic.Pointer[prometheus.Registry]
}

var _ prometheus.Collector = (*forwardCollector)(nil)

// Describe implements prometheus.Collector; it describes nothing, which
// makes the collector unchecked (its metrics are not known in advance).
func (c *forwardCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c *forwardCollector) Collect(ch chan<- prometheus.Metric) {
	reg := c.cur.Load()
	if reg == nil {
		return
	}
	mfs, err := reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var names, values []string
			for _, l := range m.GetLabel() {
				names, values = append(names, l.GetName()), append(values, l.GetValue())
			}
			d := prometheus.NewDesc(mf.GetName(), mf.GetHelp(), names, nil)
			switch {
			case m.Counter != nil:
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, m.GetCounter().GetValue(), values...)
			case m.Gauge != nil:
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, m.GetGauge().GetValue(), values...)
			}
		}
	}
}
