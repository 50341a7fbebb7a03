package natsbus

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bus is a live NATS connection, and the embedded server behind it when
// there is one.
type Bus struct {
	cfg Config
	log *slog.Logger
	srv *server.Server // nil for an external server
	nc  *nats.Conn
	js  jetstream.JetStream
	url string
	// tokenFile is where the token came from (Config.TokenFile), if
	// anywhere.
	tokenFile string

	mu       sync.Mutex
	nextHook int
	hooks    map[int]func()

	closed   chan struct{} // closed when the client connection is closed
	shutOnce sync.Once

	// The failover watch (failover.go).
	stop      chan struct{} // closed by Shutdown
	wg        sync.WaitGroup
	prefer    atomic.Value // string: the host the next reconnect goes to, once
	failovers atomic.Uint64
}

// Start starts the embedded server (when cfg.URL is empty) and connects to
// it, or connects to the external server at cfg.URL. The first connection
// must succeed within cfg.StartTimeout; after that the client reconnects
// forever. log may be nil.
func Start(cfg Config, log *slog.Logger) (*Bus, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	b := &Bus{cfg: cfg, log: log, hooks: map[int]func(){}, closed: make(chan struct{}), url: cfg.URL, stop: make(chan struct{})}
	b.prefer.Store("")
	if cfg.TokenFile != "" {
		var err error
		if cfg.Embedded() {
			var created bool
			if b.cfg.Token, created, err = EnsureTokenFile(cfg.TokenFile); err == nil && created {
				log.Info("generated a random NATS token for the embedded server in "+cfg.TokenFile, "token_file", cfg.TokenFile)
			}
		} else {
			b.cfg.Token, err = ReadTokenFile(cfg.TokenFile)
		}
		if err != nil {
			return nil, err
		}
		b.tokenFile, b.cfg.TokenFile = cfg.TokenFile, ""
	}
	if cfg.Embedded() {
		if err := b.startServer(); err != nil {
			return nil, err
		}
	}
	opts, err := b.ConnectOptions(cfg.Name)
	if err != nil {
		b.stopServer()
		return nil, err
	}
	opts = append(opts,
		nats.ConnectHandler(func(nc *nats.Conn) {
			b.log.Info("nats connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				b.log.Debug("nats connection closed") // our own Shutdown
				return
			}
			b.log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
			b.runHooks()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(b.closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			b.log.Warn("nats async error", "subject", subj, "err", err)
		}),
	)
	if cfg.failoverEnabled() {
		opts = append(opts, nats.ReconnectToServer(b.reconnectTo))
	}
	nc, err := connectWithin(b.url, opts, cfg)
	if err != nil {
		b.stopServer()
		return nil, fmt.Errorf("connecting to nats at %s: %w", redact(b.url), err)
	}
	b.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		b.stopServer()
		return nil, fmt.Errorf("jetstream context: %w", err)
	}
	b.js = js
	if cfg.failoverEnabled() {
		b.wg.Add(1)
		go b.watchJetStream()
	}
	return b, nil
}

// connectWithin dials until the first connection succeeds or the start
// timeout passes (a cluster may still be coming up).
func connectWithin(url string, opts []nats.Option, cfg Config) (*nats.Conn, error) {
	attempts := max(int(cfg.StartTimeout/cfg.ReconnectWait), 1)
	var err error
	for i := range attempts {
		var nc *nats.Conn
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if i+1 < attempts {
			time.Sleep(cfg.ReconnectWait)
		}
	}
	return nil, err
}

func (b *Bus) startServer() error {
	o := &server.Options{
		ServerName: b.cfg.ServerName,
		Host:       b.cfg.Host,
		Port:       b.cfg.Port,
		JetStream:  b.cfg.JetStream,
		NoSigs:     true,
		NoLog:      false,
	}
	if b.cfg.JetStream {
		o.StoreDir = filepath.Join(b.cfg.DataDir, "nats")
	}
	if b.cfg.Token != "" {
		o.Authorization = b.cfg.Token
	}
	if b.cfg.User != "" {
		o.Username, o.Password = b.cfg.User, b.cfg.Password
	}
	srv, err := server.NewServer(o)
	if err != nil {
		return fmt.Errorf("embedded nats server: %w", err)
	}
	srv.SetLogger(serverLogger{b.log.With("component", "nats-server")}, false, false)
	srv.Start()
	if !srv.ReadyForConnections(b.cfg.StartTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return fmt.Errorf("embedded nats server on %s:%d not ready within %v", b.cfg.Host, b.cfg.Port, b.cfg.StartTimeout)
	}
	b.srv = srv
	b.url = srv.ClientURL()
	b.url = selfURL(b.cfg.Host, srv.ClientURL())
	auth := "none: open to every client that reaches it"
	switch {
	case b.cfg.Token != "" && b.tokenFile != "":
		auth = "token (other processes: --nats-token-file " + b.tokenFile + ")"
	case b.cfg.Token != "":
		auth = "token"
	case b.cfg.User != "":
		auth = "user/password"
	}
	b.log.Info("embedded NATS listening on "+b.url, "url", b.url, "jetstream", b.cfg.JetStream, "store", o.StoreDir, "auth", auth)
	return nil
}

func (b *Bus) stopServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
}

// ConnectOptions returns the client options (credentials, TLS, reconnect
// forever) for another connection to the same server, named name: for an
// in-process agent, a second subscriber, or a test.
func (b *Bus) ConnectOptions(name string) ([]nats.Option, error) {
	c := b.cfg
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(c.ConnectTimeout),
		nats.ReconnectWait(c.ReconnectWait),
		nats.MaxReconnects(-1),
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if c.NKeySeedFile != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file: %w", err)
		}
		opts = append(opts, o)
	}
	if c.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(c.TLSCAFile))
	}
	if c.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(c.TLSCertFile, c.TLSKeyFile))
	}
	return opts, nil
}

// Conn returns the bus's client connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns a JetStream context on the bus's connection.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// TokenFile returns the file the bus's token was read from (or written
// to), empty when the token did not come from a file: what to tell other
// processes that must connect (--nats-token-file), never the token.
func (b *Bus) TokenFile() string { return b.tokenFile }

// Authenticated reports whether the bus presents a credential (and its
// embedded server, if any, requires it).
func (b *Bus) Authenticated() bool { return b.cfg.HasAuth() }

// Embedded reports whether the bus runs the embedded server.
func (b *Bus) Embedded() bool { return b.srv != nil }

// ClientURL returns the URL clients connect to: the embedded server's
// listening address, or the configured external URL.
func (b *Bus) ClientURL() string { return b.url }

// OnReconnect registers fn to run after every reconnect (not the first
// connect), so that its owner can recover what it missed. Hooks run one
// after another on the client's callback goroutine: keep them short or hand
// the work to your own goroutine. The returned function unregisters fn.
func (b *Bus) OnReconnect(fn func()) (remove func()) {
	b.mu.Lock()
	id := b.nextHook
	b.nextHook++
	b.hooks[id] = fn
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		delete(b.hooks, id)
		b.mu.Unlock()
	}
}

func (b *Bus) runHooks() {
	b.mu.Lock()
	fns := make([]func(), 0, len(b.hooks))
	for _, fn := range b.hooks {
		fns = append(fns, fn)
	}
	b.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Shutdown closes the client connection and stops the embedded server. It
// does not wait; call WaitForShutdown for that. Safe to call more than once.
func (b *Bus) Shutdown() {
	b.shutOnce.Do(func() {
		close(b.stop)
		b.nc.Close()
		if b.srv != nil {
			b.srv.Shutdown()
		}
		b.log.Info("nats bus shut down")
	})
}

// WaitForShutdown blocks until Shutdown has finished: the connection's
// callbacks are done and the embedded server's goroutines have exited.
func (b *Bus) WaitForShutdown() {
	b.wg.Wait()
	<-b.closed
	if b.srv != nil {
		b.srv.WaitForShutdown()
	}
}

// selfURL is the URL the process uses to reach its own embedded server:
// the server's client URL, over loopback when it listens on every interface.
func selfURL(host, clientURL string) string {
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsUnspecified() {
		return clientURL
	}
	u, err := neturl.Parse(clientURL)
	if err != nil {
		return clientURL
	}
	u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	return u.String()
}

// redact hides credentials embedded in a URL list.
func redact(url string) string {
	if url == "" {
		return "(embedded)"
	}
	parts := strings.Split(url, ",")
	for i, p := range parts {
		if u, err := neturl.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
