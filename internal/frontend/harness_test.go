package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/metricstest"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testModel = "Qwen/Qwen3-0.6B"

var (
	tmplOnce sync.Once
	tmpl     *chattemplate.Template
	tmplErr  error
)

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func testTemplate(t testing.TB) *chattemplate.Template {
	t.Helper()
	tmplOnce.Do(func() {
		tmpl, tmplErr = chattemplate.Load(modelfiles.Qwen3TokenizerConfig(), chattemplate.DefaultConfig())
	})
	if tmplErr != nil {
		t.Fatal(tmplErr)
	}
	return tmpl
}

// testDir is a Directory backed by a map.
type testDir struct {
	mu       sync.Mutex
	m        map[kvevent.WorkerID]WorkerEntry
	order    []kvevent.WorkerID
	failures []string
}

func (d *testDir) set(e WorkerEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[kvevent.WorkerID]WorkerEntry{}
	}
	if _, ok := d.m[e.ID]; !ok {
		d.order = append(d.order, e.ID)
	}
	d.m[e.ID] = e
}

func (d *testDir) Lookup(id kvevent.WorkerID) (WorkerEntry, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.m[id]
	return e, ok
}

func (d *testDir) List() []WorkerEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]WorkerEntry, 0, len(d.order))
	for _, id := range d.order {
		out = append(out, d.m[id])
	}
	return out
}

func (d *testDir) WorkerFailed(id kvevent.WorkerID, reason string, _ error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = append(d.failures, fmt.Sprintf("%d:%s", id, reason))
}

var (
	_ Directory       = (*testDir)(nil)
	_ FailureReporter = (*testDir)(nil)
)

// mock is a mock vLLM worker on a loopback port.
type mock struct {
	w    *server.Worker
	url  string
	stop func()
}

// startMockModel starts a mock worker serving model with block size bs.
func startMockModel(t testing.TB, id uint64, model string, bs int, speedup float64, sinks ...server.EventSink) *mock {
	t.Helper()
	return startMockConfig(t, id, speedup, func(c *server.Config) {
		c.Sinks, c.Model, c.Engine.BlockSize = sinks, model, bs
	})
}

// startMockConfig starts a mock worker of the harness's defaults (the
// test model, block size 16, 2,048 blocks) that set may change.
func startMockConfig(t testing.TB, id uint64, speedup float64, set func(*server.Config)) *mock {
	t.Helper()
	c := server.DefaultConfig()
	c.Model = testModel
	c.WorkerID = id
	c.Engine.BlockSize = 16
	c.Engine.NumGPUBlocks = 2048
	c.Engine.SpeedupRatio = speedup
	c.Tokenizer = testTokenizer(t)
	if set != nil {
		set(&c)
	}
	c.Logger = slog.New(slog.DiscardHandler)
	w, err := server.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Serve(ctx, ln) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-errc }) }
	t.Cleanup(stop)
	return &mock{w: w, url: "http://" + ln.Addr().String(), stop: stop}
}

// fleet is a front door over n mock workers in approximate mode.
type testFleet struct {
	t       testing.TB
	r       *router.Router
	idx     *router.Serial
	dir     *testDir
	f       *Frontend
	reg     *prometheus.Registry
	front   *httptest.Server
	mocks   []*mock
	client  *http.Client
	ready   error
	readyMu sync.Mutex
}

type fleetOpt struct {
	workers int
	speedup float64
	cfg     func(*Config)
	rcfg    func(*router.Config)
	// exact feeds the workers' KV events to the router (exact mode)
	// instead of approximate mode.
	exact bool
	// wrap, when set, wraps the router the front door is given.
	wrap func(Router) Router
	// roles, when set, disaggregates the fleet (docs/pd.md): worker i+1
	// has role roles[i] in the router and its mock plays that side of
	// vLLM's protocol (a both-role worker is aggregated); there are at
	// least as many workers as roles.
	roles []router.Role
}

// routerSink applies a mock worker's KV events to the router as they are
// published, the way the event plane will.
type routerSink struct {
	r  *router.Router
	id kvevent.WorkerID
}

func (s routerSink) Publish(b server.Batch, _ server.Delivery) error {
	for _, e := range b.Events {
		if err := s.r.ApplyEvent(e.KVEvent(kvevent.WorkerRank{ID: s.id, Rank: kvevent.DPRank(b.Rank)})); err != nil {
			return err
		}
	}
	return nil
}

func (routerSink) Restart(int)  {}
func (routerSink) Close() error { return nil }

func newFleet(t testing.TB, o fleetOpt) *testFleet {
	t.Helper()
	if o.speedup == 0 {
		o.speedup = 1000
	}
	o.workers = max(o.workers, len(o.roles))
	rc := router.DefaultConfig()
	rc.BlockSize = 16
	rc.Seed = 7
	if o.rcfg != nil {
		o.rcfg(&rc)
	}
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	fl := &testFleet{t: t, idx: router.NewSerial(x), dir: &testDir{}, reg: prometheus.NewRegistry()}
	fl.r, err = router.New(rc, fl.idx, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range o.workers {
		id := uint64(i + 1)
		mode, status := router.Approximate, fleet.Status{State: fleet.StateApprox, Reason: "no events", Since: time.Now()}
		var sinks []server.EventSink
		if o.exact {
			mode, status = router.Exact, fleet.Status{State: fleet.StateExact, Since: time.Now()}
			sinks = append(sinks, routerSink{r: fl.r, id: kvevent.WorkerID(id)})
		}
		var role router.Role
		if i < len(o.roles) {
			role = o.roles[i]
		}
		if err := fl.r.AddWorker(router.WorkerInfo{ID: kvevent.WorkerID(id), BlockSize: 16, Mode: mode, KVCapacityBlocks: 2048, Role: role}); err != nil {
			t.Fatal(err)
		}
		m := startMockConfig(t, id, o.speedup, func(c *server.Config) {
			c.Sinks = sinks
			if mode, ok := map[router.Role]string{router.RolePrefill: server.ModePrefill, router.RoleDecode: server.ModeDecode}[role]; ok {
				c.Disagg.Mode = mode
			}
		})
		fl.mocks = append(fl.mocks, m)
		fl.dir.set(WorkerEntry{ID: kvevent.WorkerID(id), Name: "w" + string(rune('0'+id)), URL: m.url, Status: status})
	}
	cfg := DefaultConfig()
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	var rt Router = fl.r
	if o.wrap != nil {
		rt = o.wrap(rt)
	}
	fl.f, err = New(cfg, Deps{Router: rt, Directory: fl.dir, Tokenizer: testTokenizer(t), ChatTemplate: testTemplate(t),
		Index: fl.idx, Registry: fl.reg, Logger: slog.New(slog.DiscardHandler),
		Ready: func() error { fl.readyMu.Lock(); defer fl.readyMu.Unlock(); return fl.ready }})
	if err != nil {
		t.Fatal(err)
	}
	fl.front = httptest.NewServer(fl.f.Handler())
	fl.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		fl.front.Close()
		fl.client.CloseIdleConnections()
		fl.f.CloseIdleConnections()
	})
	return fl
}

// do sends a request to the front door and returns the response with its
// whole body read.
func (fl *testFleet) do(method, path string, body any, hdr ...string) (*http.Response, []byte) {
	fl.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			fl.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, fl.front.URL+path, rd)
	if err != nil {
		fl.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := fl.client.Do(req)
	if err != nil {
		fl.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		fl.t.Fatal(err)
	}
	return resp, b
}

// activeRequests sums the router's running requests.
func (fl *testFleet) activeRequests() int {
	n := 0
	for _, l := range fl.r.Loads() {
		n += l.ActiveRequests
	}
	return n
}

// waitIdle polls until the router tracks no running request.
func (fl *testFleet) waitIdle() {
	fl.t.Helper()
	poll.UntilState(fl.t, 5*time.Second, func() (bool, string) {
		n := fl.activeRequests()
		return n == 0, fmt.Sprintf("%d running requests: %+v", n, fl.r.Loads())
	}, "no running request tracked")
}

// metric sums the series of family name carrying the given label pairs.
func (fl *testFleet) metric(name string, labels ...string) float64 {
	fl.t.Helper()
	return metricstest.Sum(fl.t, fl.reg, name, labels...)
}

// words returns n distinct-ish words seeded by seed, as prompt text.
func words(seed, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("w")
		b.WriteString(strings.Repeat(string(rune('a'+(seed+i*7)%26)), 1+(i+seed)%3))
	}
	return b.String()
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(body []byte) []string {
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		if p, ok := strings.CutPrefix(line, "data: "); ok {
			out = append(out, p)
		}
	}
	return out
}

type usageBody struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// newLoopbackServer serves h on a loopback port and returns its URL.
func newLoopbackServer(t testing.TB, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
