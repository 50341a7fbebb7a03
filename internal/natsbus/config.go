package natsbus

import (
	"errors"
	"fmt"
	"time"
)

// Config says which NATS to use and how to connect to it. Start from
// DefaultConfig and call Validate (Start does).
type Config struct {
	// URL is an external NATS server or cluster ("nats://h1:4222,nats://h2:4222").
	// Empty (the default) starts the embedded server instead.
	URL string

	// Host is the address the embedded server listens on. Default
	// "127.0.0.1" (loopback only); "0.0.0.0" exposes it.
	Host string
	// Port is the embedded server's client port; -1 picks a free port
	// (tests). Default 4222.
	Port int
	// DataDir is kvrouter's data directory; the embedded server keeps its
	// JetStream store in DataDir/nats. Required for the embedded server with
	// JetStream. Default "data".
	DataDir string
	// JetStream turns JetStream on in the embedded server (needed by the
	// registry, durable mode and snapshots). Default true.
	JetStream bool
	// ServerName names the embedded server (shown in its logs and
	// JetStream metadata). Default "kvrouter".
	ServerName string

	// Token is an auth token. Embedded: clients must present it. External:
	// presented to the server. Default "" (none). Exclusive with User.
	Token string
	// TokenFile is a file holding the token (--nats-token-file), read
	// when Token is empty. Embedded: when the file does not exist, a
	// random token is written there (mode 0600) and required from
	// clients; kvrouter serve and up point it at DataDir/nats-token when
	// no credential is configured, so that their embedded server is never
	// open. External: the token presented. Default "". Exclusive with
	// Token and User.
	TokenFile string
	// User and Password are username/password credentials, required by the
	// embedded server from clients or presented to an external server.
	// Default "" (none); both or neither.
	User     string
	Password string

	// CredsFile is a NATS .creds file (JWT + nkey seed) for an external
	// server. Default "".
	CredsFile string
	// NKeySeedFile is an nkey seed file for an external server. Default "".
	NKeySeedFile string
	// TLSCAFile is a PEM CA bundle to verify an external server. Default "".
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are a PEM client certificate and key for an
	// external server requiring mutual TLS. Default "" (both or neither).
	TLSCertFile string
	TLSKeyFile  string

	// Name is the client connection name the server shows. Default
	// "kvrouter".
	Name string
	// ConnectTimeout bounds one dial attempt. Default 5 s.
	ConnectTimeout time.Duration
	// ReconnectWait is the pause between reconnect attempts (the client
	// retries forever). Default 1 s.
	ReconnectWait time.Duration
	// StartTimeout bounds how long Start waits for the embedded server to
	// accept connections, and for the first connection to an external one.
	// Default 10 s.
	StartTimeout time.Duration

	// FailoverAfter is how long JetStream may stop answering through the
	// connected server of an external cluster before the client moves to
	// another server that answers (--nats-failover-after): a node cut
	// off from the others keeps its clients (it still answers pings) but
	// has no JetStream quorum, so heartbeats, watches and durable
	// consumers through it stall until the partition heals. The check
	// asks for JetStream's stream names (answered only with a meta
	// leader) every FailoverAfter/4; after FailoverAfter of failures it
	// asks the other servers the client knows the same on a connection of
	// their own, and reconnects to the first that answers (none answering,
	// as during a cluster-wide election, moves nothing). 0 turns it off;
	// never with the embedded server, nor while the client knows a single
	// server. Keep it well under the registry TTL
	// (a moved worker heartbeats again at once). Default 3 s.
	FailoverAfter time.Duration

	// Replicas is how many copies a NATS cluster keeps of each JetStream
	// asset kvrouter creates: the registry buckets, the durable event
	// stream and the snapshot object store (--nats-replicas). 1 to 5;
	// above 1 needs an external cluster of at least that many servers
	// with JetStream. Every process that creates or opens the assets
	// (routers, agents, mockers) should use the same value: each one
	// creates-or-updates them, and an update with another count rescales
	// the asset. Default 1.
	Replicas int
}

// MaxReplicas is the largest replica count NATS JetStream supports.
const MaxReplicas = 5

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		Host:           "127.0.0.1",
		Port:           4222,
		DataDir:        "data",
		JetStream:      true,
		ServerName:     "kvrouter",
		Name:           "kvrouter",
		ConnectTimeout: 5 * time.Second,
		ReconnectWait:  time.Second,
		StartTimeout:   10 * time.Second,
		FailoverAfter:  3 * time.Second,
		Replicas:       1,
	}
}

// Embedded reports whether the configuration starts the embedded server.
func (c Config) Embedded() bool { return c.URL == "" }

// Validate checks the configuration once, before anything starts.
func (c Config) Validate() error {
	var errs []error
	if c.Token != "" && c.User != "" {
		errs = append(errs, errors.New("token and user/password are exclusive"))
	}
	if c.TokenFile != "" && (c.Token != "" || c.User != "") {
		errs = append(errs, errors.New("token file, token and user/password are exclusive"))
	}
	if (c.User == "") != (c.Password == "") {
		errs = append(errs, errors.New("user and password go together"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("tls cert and key files go together"))
	}
	if c.CredsFile != "" && c.NKeySeedFile != "" {
		errs = append(errs, errors.New("creds file and nkey seed file are exclusive"))
	}
	if c.ConnectTimeout <= 0 || c.ReconnectWait <= 0 || c.StartTimeout <= 0 {
		errs = append(errs, errors.New("connect timeout, reconnect wait and start timeout must be positive"))
	}
	if c.FailoverAfter < 0 {
		errs = append(errs, fmt.Errorf("failover after %v: want 0 (off) or more", c.FailoverAfter))
	}
	if c.Replicas < 1 || c.Replicas > MaxReplicas {
		errs = append(errs, fmt.Errorf("replicas %d: want 1..%d", c.Replicas, MaxReplicas))
	}
	if c.Embedded() {
		if c.Replicas > 1 {
			errs = append(errs, fmt.Errorf("replicas %d need an external NATS cluster (set the NATS URL); the embedded server is a single node", c.Replicas))
		}
		if c.Port != -1 && (c.Port < 1 || c.Port > 65535) {
			errs = append(errs, fmt.Errorf("port %d: want 1..65535, or -1 for a free port", c.Port))
		}
		if c.Host == "" {
			errs = append(errs, errors.New("embedded server needs a host"))
		}
		if c.JetStream && c.DataDir == "" {
			errs = append(errs, errors.New("embedded server with JetStream needs a data dir"))
		}
		if c.CredsFile != "" || c.NKeySeedFile != "" || c.TLSCAFile != "" || c.TLSCertFile != "" {
			errs = append(errs, errors.New("creds, nkey and TLS options apply to an external server (set the NATS URL)"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nats config: %w", err)
	}
	return nil
}
