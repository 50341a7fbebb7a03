package natsbus

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
)

// NewToken returns a fresh random NATS token: 32 bytes from crypto/rand,
// hex-encoded.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics rather than return an error)
	return hex.EncodeToString(b[:])
}

// maxTokenFile bounds how much of a token file is read.
const maxTokenFile = 4096

// ReadTokenFile returns the token held in path (surrounding white space
// trimmed). An empty file is an error.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("nats token file: %w", err)
	}
	defer f.Close()
	b := make([]byte, maxTokenFile+1)
	n, _ := f.Read(b)
	if n > maxTokenFile {
		return "", fmt.Errorf("nats token file %s: longer than %d bytes", path, maxTokenFile)
	}
	tok := strings.TrimSpace(string(b[:n]))
	if tok == "" {
		return "", fmt.Errorf("nats token file %s: empty", path)
	}
	return tok, nil
}

// EnsureTokenFile returns the token held in path, or, when the file does
// not exist, writes a fresh NewToken there (mode 0600, its directory
// created 0700) and returns it with created set: what the embedded server
// does when no credential is configured, so that a restarted router keeps
// the token its agents were given.
func EnsureTokenFile(path string) (tok string, created bool, err error) {
	tok, err = ReadTokenFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("nats token file: %w", err)
	}
	tok = NewToken()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) { // another process wrote it meanwhile
			tok, err = ReadTokenFile(path)
			return tok, false, err
		}
		return "", false, fmt.Errorf("nats token file: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("nats token file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("nats token file %s: %w", path, err)
	}
	return tok, true, nil
}

// HasAuth reports whether the configuration carries a credential: a
// token or token file, user and password, a .creds file or an nkey seed
// (or credentials in an external URL).
func (c Config) HasAuth() bool {
	if c.Token != "" || c.TokenFile != "" || c.User != "" || c.CredsFile != "" || c.NKeySeedFile != "" {
		return true
	}
	for u := range strings.SplitSeq(c.URL, ",") {
		if pu, err := neturl.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			return true
		}
	}
	return false
}

// BeyondLoopback reports whether NATS is reachable from beyond this host:
// the embedded server listening on a non-loopback address, or an
// external server on a host that is not loopback.
func (c Config) BeyondLoopback() bool {
	if c.Embedded() {
		return !loopback(c.Host)
	}
	for u := range strings.SplitSeq(c.URL, ",") {
		u = strings.TrimSpace(u)
		if !strings.Contains(u, "://") {
			u = "nats://" + u
		}
		pu, err := neturl.Parse(u)
		if err != nil || !loopback(pu.Hostname()) {
			return true
		}
	}
	return false
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AuthWarnings returns what is unsafe about a configuration without
// credentials, for a loud warning at start (none when it has some):
// httpKeys says the HTTP front door is protected by keys, which NATS then
// undoes (anyone who can reach NATS can register a worker and be sent
// prompts).
func (c Config) AuthWarnings(httpKeys bool) []string {
	if c.HasAuth() {
		return nil
	}
	var out []string
	if httpKeys {
		out = append(out, "HTTP keys are set but NATS has no credential: any client that reaches NATS can register a worker (and be sent prompts) or rewrite a worker's URL")
	}
	if c.BeyondLoopback() {
		out = append(out, "NATS is reachable beyond loopback and has no credential: any host that reaches it can register a worker (and be sent prompts) or rewrite a worker's URL")
	}
	return out
}
