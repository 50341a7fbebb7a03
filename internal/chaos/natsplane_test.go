package chaos

import (
	"context"
	"fmt"
	"net"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/eventplane/natsevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/registry"
)

// natsServer is a NATS server with JetStream that a schedule can stop and
// start again on the same port with the same store (an external NATS the
// routers and workers connect to).
type natsServer struct {
	srv  *natsserver.Server
	port int
	dir  string
	url  string
}

func startNATS(dir string) (*natsServer, error) {
	s := &natsServer{port: -1, dir: dir}
	return s, s.start()
}

func (s *natsServer) start() error {
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		o := &natsserver.Options{Host: "127.0.0.1", Port: s.port, NoLog: true, NoSigs: true, JetStream: true, StoreDir: s.dir}
		var srv *natsserver.Server
		if srv, err = natsserver.NewServer(o); err == nil {
			go srv.Start()
			if srv.ReadyForConnections(10 * time.Second) {
				s.srv = srv
				s.port = srv.Addr().(*net.TCPAddr).Port
				s.url = srv.ClientURL()
				return nil
			}
			srv.Shutdown()
			srv.WaitForShutdown()
			err = fmt.Errorf("nats server on port %d not ready", s.port)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *natsServer) stop() {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// startNATS runs the worker on the NATS plane: RouterEvents through a
// natsevents publisher (recovery answered from the local indexer) and a
// registration with a TTL heartbeat, as `kvrouter mocker --event-plane
// nats` and the agent do.
func (w *worker) startNATS() error {
	nc, err := nats.Connect(w.c.natsURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return fmt.Errorf("%s: %w", w.name, err)
	}
	pc := natsevents.DefaultPublisherConfig()
	pc.Logger = w.c.log.With("worker", w.name)
	rs, err := server.NewNATSSink(nc, pc, w.id, 1)
	if err != nil {
		nc.Close()
		return fmt.Errorf("%s: %w", w.name, err)
	}
	if err := w.run(rs, rs); err != nil {
		nc.Close()
		return err
	}
	w.mu.Lock()
	w.nc = nc
	w.mu.Unlock()
	return w.register()
}

// register (re-)registers the worker in the registry.
func (w *worker) register() error {
	w.mu.Lock()
	nc, url := w.nc, "http://"+w.proxy.addr()
	w.mu.Unlock()
	rec := fleet.WorkerRecord{ID: kvevent.WorkerID(w.id), Name: w.name, Model: modelName, URL: url, BlockSize: blockSize,
		DPSize: 1, KVCapacityBlocks: uint64(w.c.cfg.kvBlocks), Events: fleet.EventSource{Kind: fleet.EventsNATS},
		Hash: fleet.DefaultHashContract(), RegisteredBy: "chaos"}
	rec.Role, rec.BootstrapPort = w.role()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var lease *registry.Lease[fleet.WorkerRecord]
	for deadline := time.Now().Add(10 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var reg *registry.Registry
		if reg, err = registry.OpenRegistry(ctx, js, registry.RegistryConfig{Bucket: registry.DefaultRegistryConfig().Bucket, TTL: w.c.ttl(), Replicas: w.c.natsReplicas()}, w.c.log); err == nil {
			lease, err = reg.Register(ctx, rec)
		}
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%s: registering: %w", w.name, err)
	}
	lease.RefreshOnReconnect(func(hook func()) func() {
		nc.SetReconnectHandler(func(*nats.Conn) { hook() })
		return func() { nc.SetReconnectHandler(nil) }
	})
	w.mu.Lock()
	w.lease = lease
	w.mu.Unlock()
	return nil
}

// expire stops the worker's heartbeats without deregistering (a worker cut
// off from NATS, a stuck agent): the record expires after the TTL and the
// routers drop the worker. The worker keeps running; it registers again
// after hold.
func (w *worker) expire(ctx context.Context, hold time.Duration) error {
	w.mu.Lock()
	lease := w.lease
	w.lease = nil
	w.mu.Unlock()
	if lease == nil {
		return nil
	}
	knew := w.c.knowers(w.name)
	lease.Abandon()
	w.c.abandon(w.name)
	from := time.Now() // no heartbeat after this
	sleep(ctx, w.c.ttl()*2+hold)
	if !w.running() {
		return nil
	}
	if err := w.register(); err != nil {
		return err
	}
	w.c.addExpiry(expiry{worker: w.name, cause: "heartbeats stopped", from: from, back: time.Now(), knew: knew})
	return nil
}

// restartNATS stops the NATS server for hold and starts it again. When
// the server stayed down longer than the TTL, every registration whose
// heartbeats ran before it certainly expired (its last put came before
// the stop, the next one after the start) and came back from the same
// process: recorded for the invariant, as one every router must keep.
func (c *cluster) restartNATS(ctx context.Context, hold time.Duration) error {
	type leased struct {
		w     *worker
		lease *registry.Lease[fleet.WorkerRecord]
		knew  map[int]uint64
	}
	var ls []leased
	for _, w := range c.workers {
		w.mu.Lock()
		lease := w.lease
		w.mu.Unlock()
		if lease != nil {
			ls = append(ls, leased{w, lease, c.knowers(w.name)})
		}
	}
	c.bus.stop()
	stopped := time.Now()
	sleep(ctx, hold)
	starting := time.Now()
	if err := c.bus.start(); err != nil {
		return err
	}
	if starting.Sub(stopped) <= c.ttl()+50*time.Millisecond { // margin: the server's timestamps
		return nil
	}
	back := time.Now().Add(c.ttl() / 3) // the reconnect re-put, or the next heartbeat at the latest
	for _, l := range ls {
		l.w.mu.Lock()
		same := l.w.lease == l.lease
		l.w.mu.Unlock()
		if same {
			c.stats.add("registrations lapsed during a NATS outage", 1)
			c.addExpiry(expiry{worker: l.w.name, cause: "NATS down for " + starting.Sub(stopped).Round(time.Millisecond).String(),
				from: stopped, back: back, knew: l.knew, kept: true})
		}
	}
	return nil
}
