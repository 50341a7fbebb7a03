package natsbus

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testConfig(t *testing.T) Config {
	c := DefaultConfig()
	c.Port = -1
	c.DataDir = t.TempDir()
	c.ReconnectWait = 50 * time.Millisecond
	c.StartTimeout = 5 * time.Second
	return c
}

func start(t *testing.T, c Config) *Bus {
	t.Helper()
	b, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Shutdown(); b.WaitForShutdown() })
	return b
}

func TestEmbeddedPubSubAndJetStream(t *testing.T) {
	c := testConfig(t)
	b := start(t, c)
	if !b.Embedded() || !strings.HasPrefix(b.ClientURL(), "nats://127.0.0.1:") {
		t.Fatalf("embedded=%v url=%q", b.Embedded(), b.ClientURL())
	}
	sub, err := b.Conn().SubscribeSync("a.b")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Publish("a.b", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil || string(m.Data) != "hi" {
		t.Fatalf("got %v, %v", m, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "nats", "jetstream")); err != nil {
		t.Errorf("JetStream store not under the data dir: %v", err)
	}
}

func TestEmbeddedRequiresToken(t *testing.T) {
	c := testConfig(t)
	c.Token = "s3cret"
	b := start(t, c)
	if nc, err := nats.Connect(b.ClientURL(), nats.Timeout(time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without the token")
	}
	opts, err := b.ConnectOptions("other")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	nc.Close()
}

func TestEmbeddedRequiresUserPassword(t *testing.T) {
	c := testConfig(t)
	c.User, c.Password = "router", "pw"
	b := start(t, c)
	if nc, err := nats.Connect(b.ClientURL(), nats.UserInfo("router", "wrong"), nats.Timeout(time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected with a wrong password")
	}
	// An external client with the same credentials gets in.
	ext := DefaultConfig()
	ext.URL = b.ClientURL()
	ext.User, ext.Password = "router", "pw"
	e := start(t, ext)
	if e.Embedded() || !e.Conn().IsConnected() {
		t.Fatalf("external bus: embedded=%v connected=%v", e.Embedded(), e.Conn().IsConnected())
	}
}

// The client survives a server restart and runs the reconnect hooks.
func TestReconnectRunsHooks(t *testing.T) {
	c := testConfig(t)
	srv1, err := Start(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := srv1.ClientURL()
	ext := DefaultConfig()
	ext.URL = url
	ext.ReconnectWait = 20 * time.Millisecond
	client := start(t, ext)
	hooked := make(chan struct{}, 4)
	removed := make(chan struct{}, 4)
	client.OnReconnect(func() { hooked <- struct{}{} })
	remove := client.OnReconnect(func() { removed <- struct{}{} })
	remove()
	sub, err := client.Conn().SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}

	srv1.Shutdown()
	srv1.WaitForShutdown()
	c2 := c
	c2.Port = portOf(t, url)
	srv2 := start(t, c2)

	select {
	case <-hooked:
	case <-time.After(10 * time.Second):
		t.Fatal("reconnect hook not run")
	}
	select {
	case <-removed:
		t.Fatal("a removed hook ran")
	default:
	}
	// The subscription was restored by the client.
	poll.Until(t, 5*time.Second, func() bool {
		if err := srv2.Conn().Publish("x", []byte("again")); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(100 * time.Millisecond)
		return err == nil && string(m.Data) == "again"
	}, "the subscription restored after reconnect")
}

func portOf(t *testing.T, url string) int {
	t.Helper()
	i := strings.LastIndexByte(url, ':')
	var p int
	for _, ch := range url[i+1:] {
		p = p*10 + int(ch-'0')
	}
	if p == 0 {
		t.Fatalf("no port in %q", url)
	}
	return p
}

func TestExternalUnreachable(t *testing.T) {
	c := DefaultConfig()
	c.URL = "nats://127.0.0.1:1"
	c.ReconnectWait = 20 * time.Millisecond
	c.StartTimeout = 60 * time.Millisecond
	c.ConnectTimeout = 100 * time.Millisecond
	if b, err := Start(c, nil); err == nil {
		b.Shutdown()
		b.WaitForShutdown()
		t.Fatal("connected to nothing")
	}
}

func TestValidate(t *testing.T) {
	ok := DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := map[string]func(*Config){
		"token and user":          func(c *Config) { c.Token, c.User, c.Password = "t", "u", "p" },
		"user without password":   func(c *Config) { c.User = "u" },
		"cert without key":        func(c *Config) { c.URL, c.TLSCertFile = "nats://x:4222", "c.pem" },
		"creds and nkey":          func(c *Config) { c.URL, c.CredsFile, c.NKeySeedFile = "nats://x:4222", "a", "b" },
		"port zero":               func(c *Config) { c.Port = 0 },
		"port too big":            func(c *Config) { c.Port = 70000 },
		"no data dir":             func(c *Config) { c.DataDir = "" },
		"no host":                 func(c *Config) { c.Host = "" },
		"creds while embedded":    func(c *Config) { c.CredsFile = "x.creds" },
		"zero reconnect wait":     func(c *Config) { c.ReconnectWait = 0 },
		"zero replicas":           func(c *Config) { c.URL, c.Replicas = "nats://x:4222", 0 },
		"six replicas":            func(c *Config) { c.URL, c.Replicas = "nats://x:4222", 6 },
		"replicas while embedded": func(c *Config) { c.Replicas = 3 },
		"negative failover":       func(c *Config) { c.URL, c.FailoverAfter = "nats://x:4222", -time.Second },
	}
	for name, mut := range bad {
		c := DefaultConfig()
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	ext := DefaultConfig()
	ext.URL, ext.Port, ext.DataDir, ext.Replicas = "nats://x:4222", 0, "", 3
	if err := ext.Validate(); err != nil {
		t.Errorf("external ignores embedded-only fields: %v", err)
	}
}

func TestRedact(t *testing.T) {
	got := redact("nats://u:pw@h1:4222, nats://h2:4222")
	if strings.Contains(got, "pw") || !strings.Contains(got, "h2") {
		t.Errorf("redact = %q", got)
	}
}

func TestBindFlags(t *testing.T) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse([]string{"--nats-url", "nats://a:1,nats://b:2", "--nats-token", "t", "--nats-reconnect-wait", "3s", "--nats-replicas", "3", "--nats-failover-after", "0"}); err != nil {
		t.Fatal(err)
	}
	if c.URL != "nats://a:1,nats://b:2" || c.Token != "t" || c.ReconnectWait != 3*time.Second || c.Port != 4222 || c.Host != "127.0.0.1" || c.Replicas != 3 || c.FailoverAfter != 0 {
		t.Errorf("after flags: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestSelfURL(t *testing.T) {
	cases := map[[2]string]string{
		{"0.0.0.0", "nats://0.0.0.0:4222"}:     "nats://127.0.0.1:4222",
		{"::", "nats://[::]:4333"}:             "nats://127.0.0.1:4333",
		{"127.0.0.1", "nats://127.0.0.1:4222"}: "nats://127.0.0.1:4222",
		{"10.1.2.3", "nats://10.1.2.3:4222"}:   "nats://10.1.2.3:4222",
	}
	for in, want := range cases {
		if got := selfURL(in[0], in[1]); got != want {
			t.Errorf("selfURL(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}
