package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/logtest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/service"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

func TestServeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--bogus"}, 2, "bogus"},
		{[]string{"--port", "99999"}, 2, "--port 99999"},
		{[]string{"--worker", "name=w1"}, 2, "url"},
		{[]string{"--config", "/nonexistent.yaml"}, 2, "reading config file"},
		{[]string{"-h"}, 0, "kv-overlap-score-credit"},
		{[]string{"--event-plane", "zmq", "--router-replica-sync"}, 2, "--router-replica-sync needs --event-plane nats"},
		{[]string{"--event-plane", "kafka"}, 2, "--event-plane"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"serve"}, tc.args...), nil, &stdout, &stderr); code != tc.code {
			t.Errorf("serve %v: exit %d, want %d (%s)", tc.args, code, tc.code, stderr.String())
		}
		out := stderr.String() // errors on stderr, help on stdout
		if tc.code == 0 {
			out = stdout.String()
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("serve %v: output does not mention %q:\n%s", tc.args, tc.want, out)
		}
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"up", "--worker", "name=w1,url=http://h:1"}, nil, &bytes.Buffer{}, &stderr); code != 2 {
		t.Errorf("up --worker: exit %d, want 2", code)
	}
}

// waitMatch polls buf until re matches, returning the first group.
func waitMatch(t *testing.T, buf *logtest.Buffer, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	poll.UntilState(t, 20*time.Second, func() (bool, string) {
		out := buf.String()
		m = re.FindStringSubmatch(out)
		return m != nil, "output:\n" + out
	}, fmt.Sprintf("a match of %v", re))
	return m[1]
}

func chatOK(t *testing.T, base string) {
	t.Helper()
	poll.Until(t, 10*time.Second, func() bool {
		resp, err := http.Get(base + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the router ready")
	body := `{"model":"Qwen/Qwen3-0.6B","messages":[{"role":"user","content":"Hello!"}],"max_tokens":4}`
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil || len(v.Choices) != 1 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestServeRoutesToStaticWorkers(t *testing.T) {
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	fc := service.DefaultFleetConfig()
	fc.Workers = 1
	fc.Engine.BlockSize = 16
	fc.Engine.NumGPUBlocks = 256
	fc.Engine.SpeedupRatio = 100
	fc.Tokenizer = tok
	fc.Logger = discardLogger()
	fleet, err := service.StartFleet(fc)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Stop()
	w := fleet.Workers[0]
	ctx, cancel := context.WithCancel(context.Background())
	var stderr logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--port", "0", "--nats-port", "-1", "--data-dir", t.TempDir(), "--worker",
			fmt.Sprintf("name=%s,url=%s,events=%s,replay=%s,topic=%s", w.Name, w.URL, w.Events, w.Replay, w.Topic)},
			nil, &bytes.Buffer{}, &stderr)
	}()
	addr := waitMatch(t, &stderr, regexp.MustCompile(`msg="kvrouter serving" addr=(\S+)`))
	chatOK(t, "http://"+addr)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, stderr.String())
	}
	// The stop says what it waits for, and for how long (the chat's
	// booking may not be freed yet when its response has arrived: 0 or 1).
	if !regexp.MustCompile(`waiting up to 30s for [01] in-flight requests`).MatchString(stderr.String()) {
		t.Fatalf("no shutdown line with the in-flight count and the timeout:\n%s", stderr.String())
	}
}

// TestUpStartsFleetAndRouter runs `kvrouter up` on each event plane: the
// default (mock workers register in the embedded NATS and publish there;
// the router discovers them), zmq (RouterEvents over ZMQ) and none (vLLM's
// own ZMQ streams). Every worker ends EXACT and a chat request is served.
func TestUpStartsFleetAndRouter(t *testing.T) {
	for _, plane := range []string{"nats", "zmq", "none"} {
		t.Run(plane, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var stdout, stderr logtest.Buffer
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"up", "--port", "0", "--workers", "2", "--nats-port", "-1", "--data-dir", t.TempDir(),
					"--event-plane", plane, "--speedup-ratio", "100", "--num-gpu-blocks-override", "512"}, nil, &stdout, &stderr)
			}()
			base := waitMatch(t, &stdout, regexp.MustCompile(`router at (http://\S+)`))
			if !strings.Contains(stdout.String(), "curl "+base+"/v1/chat/completions") || !strings.Contains(stdout.String(), "status page  "+base+"/") {
				t.Fatalf("banner lacks the curl example or the status page:\n%s", stdout.String())
			}
			waitWorkersExact(t, base, 2)
			chatOK(t, base)
			nats := strings.Count(stderr.String(), "embedded NATS listening on")
			if want := map[bool]int{true: 1, false: 0}[plane == "nats"]; nats != want {
				t.Errorf("%d 'embedded NATS listening' lines, want %d:\n%s", nats, want, stderr.String())
			}
			if strings.Contains(stderr.String(), "level=INFO msg=\"Starting nats-server") {
				t.Errorf("the NATS server banner is logged at info:\n%s", stderr.String())
			}
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("up exited %d:\n%s", code, stderr.String())
			}
		})
	}
}

// TestUpChatTemplateAgrees: through `kvrouter up`, a chat request with
// tools and enable_thinking off counts the same prompt tokens on the
// router (/v1/route's input_tokens) and on the mock worker (usage).
func TestUpChatTemplateAgrees(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr logtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"up", "--port", "0", "--workers", "1", "--nats-port", "-1", "--data-dir", t.TempDir(),
			"--speedup-ratio", "100", "--num-gpu-blocks-override", "512"}, nil, &stdout, &stderr)
	}()
	base := waitMatch(t, &stdout, regexp.MustCompile(`router at (http://\S+)`))
	waitWorkersExact(t, base, 1)
	body := `{"model":"Qwen/Qwen3-0.6B","max_tokens":2,"chat_template_kwargs":{"enable_thinking":false},` +
		`"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather in a city",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]}`
	var route struct {
		InputTokens int `json:"input_tokens"`
	}
	postJSON(t, base+"/v1/route", body, &route)
	var chat struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	postJSON(t, base+"/v1/chat/completions", body, &chat)
	if route.InputTokens == 0 || route.InputTokens != chat.Usage.PromptTokens {
		t.Fatalf("router counted %d prompt tokens, worker %d", route.InputTokens, chat.Usage.PromptTokens)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("up exited %d:\n%s", code, stderr.String())
	}
}

func postJSON(t *testing.T, url, body string, v any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("POST %s: %v in %s", url, err, b)
	}
}

// waitWorkersExact polls /v1/workers until n workers are listed, all EXACT.
func waitWorkersExact(t *testing.T, base string, n int) {
	t.Helper()
	poll.UntilState(t, 20*time.Second, func() (bool, string) {
		resp, err := http.Get(base + "/v1/workers")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var v struct {
			Workers []struct {
				State string `json:"state"`
			} `json:"workers"`
		}
		if json.Unmarshal(b, &v) != nil || len(v.Workers) != n {
			return false, "/v1/workers: " + string(b)
		}
		for _, w := range v.Workers {
			if w.State != "EXACT" {
				return false, "/v1/workers: " + string(b)
			}
		}
		return true, ""
	}, fmt.Sprintf("%d EXACT workers", n))
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
