package natsbus

import "flag"

// BindFlags registers the NATS flags on fs, writing into c (whose current
// values are the defaults shown): --nats-url, --nats-host, --nats-port,
// --nats-token, --nats-token-file, --nats-user, --nats-password, --nats-creds, --nats-nkey,
// --nats-tls-ca, --nats-tls-cert, --nats-tls-key, --nats-reconnect-wait, --nats-failover-after, --nats-replicas.
// DataDir is left to the caller's shared --data-dir.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "nats-url", c.URL, "external NATS server or cluster URL(s), comma-separated; empty starts the embedded server")
	fs.StringVar(&c.Host, "nats-host", c.Host, "address the embedded NATS server listens on (0.0.0.0 exposes it)")
	fs.IntVar(&c.Port, "nats-port", c.Port, "client port of the embedded NATS server (-1: any free port)")
	fs.StringVar(&c.Token, "nats-token", c.Token, "NATS auth token (required by the embedded server when set)")
	fs.StringVar(&c.TokenFile, "nats-token-file", c.TokenFile, "file holding the NATS token (the embedded server of serve and up writes a random one to <data-dir>/nats-token when no credential is set)")
	fs.StringVar(&c.User, "nats-user", c.User, "NATS user (required by the embedded server when set)")
	fs.StringVar(&c.Password, "nats-password", c.Password, "NATS password")
	fs.StringVar(&c.CredsFile, "nats-creds", c.CredsFile, "NATS .creds file for an external server")
	fs.StringVar(&c.NKeySeedFile, "nats-nkey", c.NKeySeedFile, "NATS nkey seed file for an external server")
	fs.StringVar(&c.TLSCAFile, "nats-tls-ca", c.TLSCAFile, "PEM CA bundle to verify an external NATS server")
	fs.StringVar(&c.TLSCertFile, "nats-tls-cert", c.TLSCertFile, "PEM client certificate for an external NATS server")
	fs.StringVar(&c.TLSKeyFile, "nats-tls-key", c.TLSKeyFile, "PEM client key for an external NATS server")
	fs.DurationVar(&c.ReconnectWait, "nats-reconnect-wait", c.ReconnectWait, "pause between NATS reconnect attempts (reconnects forever)")
	fs.DurationVar(&c.FailoverAfter, "nats-failover-after", c.FailoverAfter, "move to another server of an external NATS cluster once JetStream has not answered through the connected one for this long and another one answers (0: never)")
	fs.IntVar(&c.Replicas, "nats-replicas", c.Replicas, "JetStream replicas of the registry buckets, durable event stream and snapshot store kvrouter creates (1-5; above 1 needs an external NATS cluster)")
}
