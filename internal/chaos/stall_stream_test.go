package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/service"
)

// sharedModel loads the embedded model files once for this package's
// start-up and stall tests (slow under -race).
var sharedModel = sync.OnceValues(func() (service.Model, error) { return service.LoadModel("") })

// stallRig is one router (internal/service) in front of one mock worker
// reached through the fault proxy, with no event plane.
type stallRig struct {
	svc    *service.Service
	reg    *prometheus.Registry
	url    string
	px     *proxy
	cancel context.CancelFunc
	done   chan error
	logs   *logBuf // the router's
}

func newStallRig(t *testing.T, idle, shutdown time.Duration) *stallRig {
	t.Helper()
	model, err := sharedModel()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	fc := service.DefaultFleetConfig()
	fc.Workers = 1
	fc.Model = modelName
	fc.Engine.BlockSize = blockSize
	fc.Engine.SpeedupRatio = 20 // a few ms per token: streams last seconds
	fc.Tokenizer = model.Tokenizer
	fc.Logger = log
	mock, err := service.StartFleet(fc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mock.Stop)
	px, err := newProxy(strings.TrimPrefix(mock.Workers[0].URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.close)

	cfg := config.Default()
	cfg.Port = 0
	cfg.DataDir = t.TempDir()
	cfg.BlockSize = blockSize
	cfg.EventPlane.Kind = config.PlaneNone
	cfg.Workers = []fleet.StaticWorker{{Name: "w1", URL: "http://" + px.addr(), BlockSize: blockSize}}
	cfg.Events.HealthInterval = 0 // the stall would fail the probes too
	cfg.Frontend.StreamIdleTimeout = idle
	cfg.Frontend.ShutdownTimeout = shutdown
	r := &stallRig{reg: prometheus.NewRegistry(), px: px, done: make(chan error, 1), logs: &logBuf{}}
	if r.svc, err = service.New(cfg, service.Options{Logger: slog.New(slog.NewTextHandler(r.logs, nil)), Registry: r.reg}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.svc.Close()
		t.Fatal(err)
	}
	r.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.svc.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		r.done <- nil
	})
	return r
}

// stream starts a long streaming completion and returns the reader after
// its first SSE event.
func (r *stallRig) stream(t *testing.T) (*bufio.Reader, func()) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"prompt":"tell a very long story about the sea","max_tokens":3000,"stream":true}`, modelName)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Post(r.url+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("status %d", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		resp.Body.Close()
		t.Fatalf("first event %q, %v", line, err)
	}
	return br, func() { resp.Body.Close() }
}

// bookings is the router's running requests.
func (r *stallRig) bookings() int {
	n := 0
	for _, l := range r.svc.Router().Loads() {
		n += l.ActiveRequests
	}
	return n
}

func (r *stallRig) waitNoBookings(t *testing.T) {
	t.Helper()
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		n := r.bookings()
		return n == 0, fmt.Sprintf("%d bookings left", n)
	}, "no booking left")
}

// TestStallMidStreamEndsWithError: a worker whose bytes stop flowing
// mid-stream (the proxy holds them; the connection stays open) no longer
// pins the client and the booking: after the stream idle timeout the
// client reads an SSE error event (worker_timeout) and the end of the
// stream, the booking returns to zero and the timeout is counted.
func TestStallMidStreamEndsWithError(t *testing.T) {
	const idle = 300 * time.Millisecond
	r := newStallRig(t, idle, 5*time.Second)
	br, closeBody := r.stream(t)
	defer closeBody()
	r.px.stall(true)
	start := time.Now()
	rest, err := io.ReadAll(br)
	took := time.Since(start)
	r.px.stall(false)
	if err != nil {
		t.Fatalf("stream cut instead of ended with an error event: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "data: {\"error\"") || !strings.Contains(last, `"code":"worker_timeout"`) {
		t.Fatalf("last line %q; want an SSE error event with code worker_timeout", last)
	}
	if took > idle+3*time.Second {
		t.Errorf("the client waited %v after the stall; want about %v", took, idle)
	}
	r.waitNoBookings(t)
	if got := metricstest.Sum(t, r.reg, "kvrouter_frontend_worker_stream_timeouts_total"); got != 1 {
		t.Errorf("stream timeouts = %v, want 1", got)
	}
}

// TestShutdownDuringStalledStream: with no idle timeout, only shutdown
// can end a stalled stream; Run returns within --shutdown-timeout (plus
// the short wait for handlers), the client's stream is cut and the
// booking freed.
func TestShutdownDuringStalledStream(t *testing.T) {
	const shutdown = 500 * time.Millisecond
	r := newStallRig(t, 0, shutdown)
	br, closeBody := r.stream(t)
	defer closeBody()
	r.px.stall(true)
	defer r.px.stall(false)
	start := time.Now()
	r.cancel()
	err := <-r.done
	took := time.Since(start)
	r.done <- err // for the cleanup
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took < shutdown || took > shutdown+3*time.Second {
		t.Errorf("shutdown took %v; want --shutdown-timeout %v plus at most a few seconds", took, shutdown)
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Error("the stalled stream ended as if complete; want it cut")
	}
	if n := r.bookings(); n != 0 {
		t.Errorf("%d bookings left after shutdown", n)
	}
	// The stop said what it waited for: the one stalled stream.
	if want := "waiting up to 500ms for 1 in-flight requests"; !strings.Contains(r.logs.tail(1<<20), want) {
		t.Errorf("the router's shutdown log lacks %q:\n%s", want, r.logs.tail(4000))
	}
}
