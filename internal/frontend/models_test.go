package frontend

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/prometheus/client_golang/prometheus"
)

// testModels is a Models over router pools and a map of model files.
type testModels struct {
	pools *router.Pools
	files map[string]ModelFiles
}

func (m testModels) Model(name string) (ModelFiles, bool) {
	f, ok := m.files[name]
	return f, ok
}

func (m testModels) Routable() []string {
	infos, down := m.pools.Workers()
	set := map[string]bool{}
	for i, w := range infos {
		if name, ok := m.pools.ModelOf(w.ID); ok && !down[i] {
			set[name] = true
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (m testModels) ModelOf(id kvevent.WorkerID) (string, bool) { return m.pools.ModelOf(id) }

// startModelMock starts a mock worker serving model with block size bs and returns its URL.
func startModelMock(t *testing.T, id uint64, model string, bs int) string {
	t.Helper()
	return startMockModel(t, id, model, bs, 1000).url
}

// Two models with different block sizes behind one front door, the second
// without a tokenizer: each model's requests reach only its workers, the
// second's text prompts are routed by their text (a repeated prompt finds
// the worker that served it), and /v1/models and /v1/workers say so.
func TestModelsRouteToTheirWorkers(t *testing.T) {
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := router.NewSerial(x)
	rc := router.DefaultConfig()
	rc.Seed = 11
	pools, err := router.NewPools(testModel, rc, idx, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := &testDir{}
	for id := uint64(1); id <= 4; id++ {
		model, bs := testModel, 16
		if id > 2 {
			model, bs = "model-b", 32
		}
		pool := model
		if model == testModel {
			pool = ""
		}
		if err := pools.AddWorker(pool, router.WorkerInfo{ID: kvevent.WorkerID(id), BlockSize: bs, Mode: router.Approximate, KVCapacityBlocks: 2048}); err != nil {
			t.Fatal(err)
		}
		url := startModelMock(t, id, model, bs)
		dir.set(WorkerEntry{ID: kvevent.WorkerID(id), Name: "w" + strconv.FormatUint(id, 10), URL: url,
			Status: fleet.Status{State: fleet.StateApprox, Reason: "no events", Since: time.Now()}})
	}
	models := testModels{pools: pools, files: map[string]ModelFiles{"model-b": {}}}
	f, err := New(DefaultConfig(), Deps{Router: pools, Directory: dir, Tokenizer: testTokenizer(t), ChatTemplate: testTemplate(t),
		Index: idx, Models: models, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(f.Handler())
	fl := &testFleet{t: t, f: f, front: front, client: front.Client()}
	t.Cleanup(func() { front.Close(); f.CloseIdleConnections() })

	resp, body := fl.do("GET", "/v1/models", nil)
	var ml struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &ml); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, body)
	}
	var ids []string
	for _, m := range ml.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{testModel, "model-b"}) {
		t.Fatalf("/v1/models lists %v", ids)
	}

	prompt := words(3, 300)
	route := func(model string, req map[string]any) (worker string, overlap int) {
		t.Helper()
		req["model"], req["max_tokens"] = model, 2
		path := "/v1/completions"
		if _, ok := req["messages"]; ok {
			path = "/v1/chat/completions"
		}
		resp, body := fl.do("POST", path, req)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: status %d: %s", model, path, resp.StatusCode, body)
		}
		n, _ := strconv.Atoi(resp.Header.Get(HeaderOverlapBlocks))
		return resp.Header.Get(HeaderWorker), n
	}
	b1, o1 := route("model-b", map[string]any{"prompt": prompt})
	if b1 != "w3" && b1 != "w4" {
		t.Fatalf("model-b's request reached %s", b1)
	}
	if o1 != 0 {
		t.Fatalf("first model-b request: overlap %d", o1)
	}
	b2, o2 := route("model-b", map[string]any{"prompt": prompt + " and one more sentence at the end"})
	if b2 != b1 || o2 == 0 {
		t.Fatalf("the same text prefix went to %s with overlap %d, want %s with some overlap", b2, o2, b1)
	}
	if a, o := route(testModel, map[string]any{"prompt": prompt}); (a != "w1" && a != "w2") || o != 0 {
		t.Fatalf("the default model's request reached %s with overlap %d (model-b's text records must not count)", a, o)
	}
	if c, _ := route("model-b", map[string]any{"messages": []map[string]string{{"role": "user", "content": prompt}}}); c != "w3" && c != "w4" {
		t.Fatalf("model-b's chat reached %s", c)
	}
	if c, _ := route("model-b", map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}); c != "w3" && c != "w4" {
		t.Fatalf("model-b's token-id request reached %s", c)
	}
	if resp, body := fl.do("POST", "/v1/completions", map[string]any{"model": "model-c", "prompt": "hi"}); resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}

	// /v1/route and /v1/query answer for the request's model.
	resp, body = fl.do("POST", "/v1/query", map[string]any{"model": "model-b", "prompt": prompt})
	var q queryResponse
	if err := json.Unmarshal(body, &q); err != nil || resp.StatusCode != 200 {
		t.Fatalf("query: %d %s", resp.StatusCode, body)
	}
	if q.BlockSize != 32 || len(q.Workers) != 2 || q.Workers[0].Worker != b1 || q.Workers[0].OverlapBlocks == 0 {
		t.Fatalf("model-b query: %s", body)
	}

	resp, body = fl.do("GET", "/v1/workers", nil)
	var wv struct {
		Workers []workerJSON `json:"workers"`
		Models  []modelView  `json:"models"`
	}
	if err := json.Unmarshal(body, &wv); err != nil || resp.StatusCode != 200 {
		t.Fatalf("workers: %d %s", resp.StatusCode, body)
	}
	want := []modelView{{testModel, true, "tokenized"}, {"model-b", false, "approximate"}}
	if !slices.Equal(wv.Models, want) {
		t.Fatalf("models %+v, want %+v", wv.Models, want)
	}
	for _, w := range wv.Workers {
		wantModel, wantBS := testModel, 16
		if w.WorkerID > 2 {
			wantModel, wantBS = "model-b", 32
		}
		if w.Model != wantModel || w.BlockSize != wantBS {
			t.Fatalf("worker %s: model %q block size %d, want %q %d", w.Worker, w.Model, w.BlockSize, wantModel, wantBS)
		}
	}
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		busy := 0
		for _, l := range pools.Loads() {
			busy += l.ActiveRequests
		}
		return busy == 0, strconv.Itoa(busy) + " requests booked"
	}, "every request freed")
}

func (testModels) Adapter(string) (string, []kvevent.WorkerID, bool) { return "", nil, false }
func (testModels) AdapterMissing(kvevent.WorkerID, string)           {}
func (testModels) Adapters() []string                                { return nil }

// TestModelsListOnlyRoutable: in a fleet of models, /v1/models lists a
// model only while it has a routable worker — the default model too —
// so a client never picks a name it would get a 503 for.
func TestModelsListOnlyRoutable(t *testing.T) {
	x, err := index.New(index.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	idx := router.NewSerial(x)
	pools, err := router.NewPools(testModel, router.DefaultConfig(), idx, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for id, pool := range map[uint64]string{1: "", 2: "model-b"} {
		if err := pools.AddWorker(pool, router.WorkerInfo{ID: kvevent.WorkerID(id), BlockSize: 16, Mode: router.Approximate, KVCapacityBlocks: 64}); err != nil {
			t.Fatal(err)
		}
	}
	models := testModels{pools: pools, files: map[string]ModelFiles{"model-b": {}}}
	cfg := DefaultConfig()
	cfg.Aliases = []string{"qwen"}
	f, err := New(cfg, Deps{Router: pools, Directory: &testDir{}, Tokenizer: testTokenizer(t), ChatTemplate: testTemplate(t),
		Index: idx, Models: models, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(f.Handler())
	t.Cleanup(front.Close)
	fl := &testFleet{t: t, f: f, front: front, client: front.Client()}
	list := func() []string {
		resp, body := fl.do("GET", "/v1/models", nil)
		var ml struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &ml); err != nil || resp.StatusCode != 200 {
			t.Fatalf("/v1/models: %d %s", resp.StatusCode, body)
		}
		ids := []string{}
		for _, m := range ml.Data {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got, want := list(), []string{testModel, "qwen", "model-b"}; !slices.Equal(got, want) {
		t.Fatalf("both models routable: /v1/models lists %v, want %v", got, want)
	}
	pools.SetDown(1, true)
	if got, want := list(), []string{"model-b"}; !slices.Equal(got, want) {
		t.Fatalf("the default model's only worker DOWN: /v1/models lists %v, want %v", got, want)
	}
	pools.SetDown(2, true)
	if got := list(); len(got) != 0 {
		t.Fatalf("every worker DOWN: /v1/models lists %v, want none", got)
	}
}
