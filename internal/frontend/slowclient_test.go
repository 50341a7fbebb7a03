package frontend

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// TestSlowClientCannotPinWorker: a streaming client that stops reading is
// cut off once one write has waited WriteTimeout: the upstream request is
// cancelled and the booking freed, instead of the worker streaming into a
// full socket forever.
func TestSlowClientCannotPinWorker(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.WriteTimeout = 200 * time.Millisecond }})
	var cancelled atomic.Bool
	pad := strings.Repeat("x", 4096)
	upstream := newLoopbackServer(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		for i := 0; ; i++ {
			select {
			case <-r.Context().Done():
				cancelled.Store(true)
				return
			default:
			}
			fmt.Fprintf(rw, "data: {\"choices\":[{\"index\":0,\"text\":\"%s\"}]}\n\n", pad)
			if rc.Flush() != nil {
				cancelled.Store(true)
				return
			}
		}
	}))
	fl.dir.set(WorkerEntry{ID: kvevent.WorkerID(1), Name: "w1", URL: upstream,
		Status: fleet.Status{State: fleet.StateApprox, Since: time.Now()}})

	conn, err := net.Dial("tcp", strings.TrimPrefix(fl.front.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"Qwen/Qwen3-0.6B","prompt":"hello there","max_tokens":100000,"stream":true}`
	fmt.Fprintf(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Never read: the socket buffers fill and the router's writes block.
	poll.UntilState(t, 15*time.Second, func() (bool, string) {
		c, n := cancelled.Load(), fl.activeRequests()
		return c && n == 0, fmt.Sprintf("upstream cancelled %v, %d requests booked", c, n)
	}, "the slow client to stop pinning the worker")
}

// TestServerLimits: the Server applies MaxHeaderBytes (oversized headers
// get 431) and closes a connection whose headers never finish after
// ReadHeaderTimeout.
func TestServerLimits(t *testing.T) {
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.MaxHeaderBytes = 4096
		c.ReadHeaderTimeout = 200 * time.Millisecond
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fl.f.NewServer(ln)
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() {
		_ = srv.Shutdown(t.Context())
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/health", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("16 KiB of headers: %d, want 431", resp.StatusCode)
	}

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /health HTTP/1.1\r\nHost: x\r\n") // headers never end
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	for {
		if _, err := conn.Read(buf); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("a connection with unfinished headers is still open after 5 s")
			}
			break // closed by the server
		}
	}
}

// TestStalledBodyClosedAtDeadline: a client that promises a body and
// sends only part of it is answered and its connection closed once
// BodyReadTimeout has passed — on the completion endpoints, which read
// the body, and on endpoints that answer without reading it (401, 404).
// net/http would otherwise drain the unread rest of a body under 256 KiB
// with no deadline and keep every such connection, unanswered, forever.
func TestStalledBodyClosedAtDeadline(t *testing.T) {
	const timeout = 300 * time.Millisecond
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) {
		c.BodyReadTimeout = timeout
		c.AdminKeys = []string{"admin"}
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := fl.f.NewServer(ln)
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	defer func() {
		_ = srv.Shutdown(t.Context())
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	cases := []struct{ path, status string }{
		{"/v1/completions", "408"},
		{"/v1/chat/completions", "408"},
		{"/v1/route", "401"},   // no admin key: answered without reading
		{"/v2/nothing", "404"}, // unknown path: answered without reading
	}
	const perCase = 25
	type conn struct {
		c      net.Conn
		status string
	}
	var conns []conn
	for _, c := range cases {
		for range perCase {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			// 9 of the 1000 promised bytes, then silence.
			fmt.Fprintf(nc, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"prompt\"", c.path)
			conns = append(conns, conn{nc, c.status})
		}
	}
	start := time.Now()
	bound := timeout + 5*time.Second
	for _, c := range conns {
		_ = c.c.SetReadDeadline(start.Add(bound))
		b, err := io.ReadAll(c.c) // the response, then EOF: the server closed it
		if err != nil {
			t.Fatalf("connection still open %v after the body stalled (read %q): %v", time.Since(start), b, err)
		}
		if !strings.HasPrefix(string(b), "HTTP/1.1 "+c.status+" ") || !strings.Contains(string(b), "Connection: close") {
			t.Fatalf("response %q, want %s with Connection: close", b, c.status)
		}
	}
	// A body that arrives in time keeps the connection and its deadline
	// is lifted: a second request on it, sent after the timeout, is
	// served.
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	for i := range 2 {
		if i == 1 {
			time.Sleep(2 * timeout) // idle between requests, longer than the body timeout
		}
		body := `{"prompt":"hi","max_tokens":1}`
		fmt.Fprintf(nc, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d on a kept-alive connection: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d: status %d, close %v", i, resp.StatusCode, resp.Close)
		}
	}
}

// Over HTTP/2 (TLS) the body read timeout is the stream's: a stalled body
// gets 408 at the deadline, and a body that arrives is served.
func TestStalledBodyHTTP2(t *testing.T) {
	const timeout = 300 * time.Millisecond
	fl := newFleet(t, fleetOpt{workers: 1, cfg: func(c *Config) { c.BodyReadTimeout = timeout }})
	srv := httptest.NewUnstartedServer(fl.f.Handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	client := srv.Client()
	client.Timeout = timeout + 5*time.Second
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"prompt"`)) }() // then silence
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", pr)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("stalled body over HTTP/2: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("%s %d %s, want HTTP/2 408", resp.Proto, resp.StatusCode, b)
	}
	resp, err = client.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":1}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %d %s", resp.Proto, resp.StatusCode, b)
	}
}
