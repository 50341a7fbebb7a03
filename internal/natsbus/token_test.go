package natsbus

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// An embedded server given a token file that does not exist writes a
// random token there (0600), requires it from clients, and keeps it
// across restarts; an external client reads the same file and gets in.
func TestEmbeddedTokenFile(t *testing.T) {
	c := testConfig(t)
	c.TokenFile = filepath.Join(c.DataDir, "sub", "nats-token")
	b := start(t, c)
	if b.TokenFile() != c.TokenFile || !b.Authenticated() {
		t.Fatalf("TokenFile %q, authenticated %v", b.TokenFile(), b.Authenticated())
	}
	fi, err := os.Stat(c.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	tok, err := ReadTokenFile(c.TokenFile)
	if err != nil || len(tok) != 64 {
		t.Fatalf("token %q, %v", tok, err)
	}
	if nc, err := nats.Connect(b.ClientURL(), nats.Timeout(time.Second)); err == nil {
		nc.Close()
		t.Fatal("connected without the token")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("refused for another reason: %v", err)
	}
	nc, err := nats.Connect(b.ClientURL(), nats.Token(tok), nats.Timeout(time.Second))
	if err != nil {
		t.Fatalf("with the token from the file: %v", err)
	}
	nc.Close()
	ext := DefaultConfig()
	ext.URL, ext.TokenFile = b.ClientURL(), c.TokenFile
	if e := start(t, ext); !e.Conn().IsConnected() {
		t.Fatal("external client with the token file not connected")
	}

	// A second start on the same file reuses the token.
	c2 := testConfig(t)
	c2.TokenFile = c.TokenFile
	start(t, c2)
	if again, _ := ReadTokenFile(c.TokenFile); again != tok {
		t.Fatal("the token changed across starts")
	}
}

func TestTokenFileErrors(t *testing.T) {
	dir := t.TempDir()
	ext := DefaultConfig()
	ext.URL, ext.TokenFile = "nats://127.0.0.1:1", filepath.Join(dir, "missing")
	if _, err := Start(ext, nil); err == nil {
		t.Fatal("external client with a missing token file started")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTokenFile(empty); err == nil {
		t.Fatal("empty token file accepted")
	}
	c := DefaultConfig()
	c.Token, c.TokenFile = "x", empty
	if err := c.Validate(); err == nil {
		t.Fatal("token and token file together accepted")
	}
}

func TestAuthWarnings(t *testing.T) {
	local := DefaultConfig()
	if w := local.AuthWarnings(false); len(w) != 0 {
		t.Errorf("embedded on loopback, no keys: %v", w)
	}
	if w := local.AuthWarnings(true); len(w) != 1 {
		t.Errorf("embedded on loopback, HTTP keys, no NATS auth: %v", w)
	}
	exposed := DefaultConfig()
	exposed.Host = "0.0.0.0"
	if w := exposed.AuthWarnings(true); len(w) != 2 {
		t.Errorf("exposed with HTTP keys: %v", w)
	}
	exposed.TokenFile = "/x"
	if w := exposed.AuthWarnings(true); len(w) != 0 {
		t.Errorf("with a token file: %v", w)
	}
	ext := DefaultConfig()
	ext.URL = "nats://127.0.0.1:4222,nats://10.0.0.5:4222"
	if w := ext.AuthWarnings(false); len(w) != 1 {
		t.Errorf("external beyond loopback: %v", w)
	}
	ext.URL = "nats://tok@10.0.0.5:4222"
	if w := ext.AuthWarnings(true); len(w) != 0 {
		t.Errorf("credentials in the URL: %v", w)
	}
	ext.URL = "localhost:4222"
	if w := ext.AuthWarnings(false); len(w) != 0 {
		t.Errorf("external on localhost: %v", w)
	}
}
