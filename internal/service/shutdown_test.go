package service

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestGracefulShutdown: cancelling Run stops new connections but lets a
// stream in flight finish; Run then returns nil with every booking freed
// (TestMain's goleak check covers the goroutines).
func TestGracefulShutdown(t *testing.T) {
	r := newRig(t, rigOpt{workers: 1})
	b, _ := json.Marshal(map[string]any{"model": model, "prompt": "Tell a long story", "max_tokens": 3000, "stream": true})
	resp, err := r.client.Post(r.url+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q, %v", line, err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	// New connections are refused once the listener is closed.
	poll.Until(t, 5*time.Second, func() bool {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
		res, err := c.Get(r.url + "/health")
		if err != nil {
			return true
		}
		res.Body.Close()
		return false
	}, "new connections refused after shutdown began")
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("stream cut during shutdown: %v", err)
	}
	if !strings.Contains(string(rest), "data: [DONE]") {
		t.Fatalf("stream did not finish: ...%q", tail(string(rest)))
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ok, why := r.noBookings(); !ok {
		t.Fatal(why)
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}

// TestLoadModelDir loads a tokenizer folder the way --tokenizer does and
// checks it encodes like the embedded one; a folder without the files is a
// clear error.
func TestLoadModelDir(t *testing.T) {
	dir := t.TempDir()
	tj, err := modelfiles.Qwen3TokenizerJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Fatalf("missing tokenizer_config.json: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), modelfiles.Qwen3TokenizerConfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	def, err := LoadModel("")
	if err != nil {
		t.Fatal(err)
	}
	const s = "Hello, world! 你好 <|im_start|>user"
	if a, b := m.Tokenizer.Encode(s, false), def.Tokenizer.Encode(s, false); !slicesEqual(a, b) {
		t.Fatalf("folder tokenizer %v, embedded %v", a, b)
	}
}

func slicesEqual(a, b []uint32) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
