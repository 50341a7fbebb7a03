package natsbus

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A NATS client stays on its server as long as the connection holds, and
// a cluster node cut off from the others still answers pings: its clients
// would wait out the whole partition with JetStream stalled (no meta
// leader, no quorum). The failover watch moves them (Config.FailoverAfter).

// failoverProbeMax bounds one probe, and failoverCheckMin the pause
// between two.
const (
	failoverProbeMax = 2 * time.Second
	failoverCheckMin = 50 * time.Millisecond
)

// failoverCheck is the pause between two probes of the connected server.
func (c Config) failoverCheck() time.Duration { return max(c.FailoverAfter/4, failoverCheckMin) }

// failoverProbe bounds one probe.
func (c Config) failoverProbe() time.Duration { return min(c.failoverCheck(), failoverProbeMax) }

// failoverEnabled reports whether the bus runs the failover watch: an
// external server with FailoverAfter set (the embedded one is a single
// node; a single external server simply has no other to move to).
func (c Config) failoverEnabled() bool { return !c.Embedded() && c.FailoverAfter > 0 }

// probeJetStream asks js for stream names, which needs the JetStream meta
// leader: it fails on a node cut off from the cluster's majority. A
// server without JetStream answers at once (no responders), and passes:
// there is nothing to move for.
func probeJetStream(ctx context.Context, js jetstream.JetStream) error {
	l := js.StreamNames(ctx, jetstream.WithStreamListSubject("kvrouter.failover.probe"))
	for range l.Name() {
	}
	err := l.Err()
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return nil
	}
	return err
}

// watchJetStream probes the connected server every failoverCheck until
// the bus shuts down; once probes have failed for FailoverAfter it looks
// for another server that answers and reconnects there.
func (b *Bus) watchJetStream() {
	defer b.wg.Done()
	t := time.NewTicker(b.cfg.failoverCheck())
	defer t.Stop()
	var since time.Time // when the current run of failed probes began; zero while probes pass
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		if !b.nc.IsConnected() || len(b.nc.Servers()) < 2 {
			// Moving by itself, or nowhere to move to (a single server
			// that announced no others): no probe.
			since = time.Time{}
			continue
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.failoverProbe())
		err := probeJetStream(ctx, b.js)
		cancel()
		if err == nil {
			if !since.IsZero() {
				b.log.Info("nats: JetStream answers again", "url", b.nc.ConnectedUrlRedacted(), "after", time.Since(since).Round(time.Millisecond))
			}
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = began
			b.log.Debug("nats: JetStream does not answer", "url", b.nc.ConnectedUrlRedacted(), "err", err)
		}
		if time.Since(since) < b.cfg.FailoverAfter {
			continue
		}
		cur := b.nc.ConnectedUrlRedacted()
		alt := b.answeringElsewhere(hostOf(cur))
		if alt == "" {
			b.log.Warn("nats: JetStream has not answered for "+b.cfg.FailoverAfter.String()+" and no other server answers; staying",
				"url", cur, "err", err)
			since = time.Now() // look again after another FailoverAfter
			continue
		}
		b.log.Warn("nats: JetStream has not answered through "+cur+" for "+time.Since(since).Round(time.Millisecond).String()+"; moving to "+alt,
			"url", cur, "to", alt, "err", err)
		b.prefer.Store(hostOf(alt))
		if err := b.nc.ForceReconnect(); err != nil {
			b.prefer.Store("")
			b.log.Warn("nats: failover reconnect", "err", err)
			continue
		}
		b.failovers.Add(1)
		since = time.Time{}
	}
}

// answeringElsewhere returns the first server the client knows, other
// than the one at host cur, where JetStream answers the probe on a
// connection of its own; "" when none does.
func (b *Bus) answeringElsewhere(cur string) string {
	opts, err := b.ConnectOptions(b.cfg.Name + "-failover-probe")
	if err != nil {
		return ""
	}
	opts = append(opts, nats.NoReconnect(), nats.IgnoreDiscoveredServers(), nats.Timeout(b.cfg.failoverProbe()))
	for _, u := range b.nc.Servers() {
		if hostOf(u) == cur {
			continue
		}
		select {
		case <-b.stop:
			return ""
		default:
		}
		if b.probeServer(u, opts) == nil {
			return u
		}
	}
	return ""
}

// probeServer connects to u alone and probes JetStream there.
func (b *Bus) probeServer(u string, opts []nats.Option) error {
	nc, err := nats.Connect(u, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.failoverProbe())
	defer cancel()
	if err := probeJetStream(ctx, js); err != nil {
		return fmt.Errorf("probing %s: %w", u, err)
	}
	return nil
}

// reconnectTo is the client's ReconnectToServer callback: the server the
// failover watch chose, once; otherwise the client's own choice.
func (b *Bus) reconnectTo(pool []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
	host := b.prefer.Swap("")
	if host == "" {
		return nil, 0
	}
	for i := range pool {
		if pool[i].URL != nil && pool[i].URL.Host == host {
			return &pool[i], 0
		}
	}
	return nil, 0
}

// Failovers returns how many times the failover watch moved the client
// to another server.
func (b *Bus) Failovers() uint64 { return b.failovers.Load() }

// hostOf is a URL's host:port ("" when it does not parse).
func hostOf(u string) string {
	p, err := neturl.Parse(u)
	if err != nil {
		return ""
	}
	return p.Host
}
