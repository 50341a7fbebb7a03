package service

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/poll"
)

// One router, two models with different block sizes, each with its own
// mock workers publishing vLLM events: a model's requests reach only its
// workers and find their cached prefix at the model's block size, and
// /v1/models and /v1/workers show both models.
func TestTwoModelsOneRouter(t *testing.T) {
	const other = "org/other-model"
	r := newRig(t, rigOpt{workers: 4, models: []FleetModel{{Name: "Qwen/Qwen3-0.6B", BlockSize: 16}, {Name: other, BlockSize: 32}},
		cfg: func(c *config.Config) { c.Models = []config.ModelSpec{{Name: other}} }})
	byModel := map[string][]string{}
	for _, w := range r.fleet.Workers {
		byModel[w.Model] = append(byModel[w.Model], w.Name)
	}
	if len(byModel[other]) != 2 || len(byModel["Qwen/Qwen3-0.6B"]) != 2 {
		t.Fatalf("fleet split %v", byModel)
	}

	code, body := r.get("/v1/models")
	var ml struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &ml); err != nil || code != http.StatusOK {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	var ids []string
	for _, m := range ml.Data {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []string{"Qwen/Qwen3-0.6B", other}) {
		t.Fatalf("/v1/models lists %v", ids)
	}

	complete := func(model string, tokens []uint32) (string, int) {
		t.Helper()
		resp, body := r.post("/v1/completions", map[string]any{"model": model, "prompt": tokens, "max_tokens": 2})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, body)
		}
		n, _ := strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
		return resp.Header.Get("X-Kvrouter-Worker"), n
	}
	ps := prompts(4, 9)
	for i, p := range ps {
		model := "Qwen/Qwen3-0.6B"
		bs := 16
		if i%2 == 1 {
			model, bs = other, 32
		}
		w, _ := complete(model, p)
		if !slices.Contains(byModel[model], w) {
			t.Fatalf("a %s request reached %s (its workers: %v)", model, w, byModel[model])
		}
		// Once the worker's stored events are in, the same prompt finds
		// its blocks there, counted at its model's block size.
		want := len(p) / bs
		poll.UntilState(t, 5*time.Second, func() (bool, string) {
			q := r.queryModel(model, p)
			return q[w] == want, "query " + strconv.Itoa(q[w]) + " blocks on " + w
		}, "the prompt's blocks indexed")
		w2, n := complete(model, p)
		if w2 != w || n != want {
			t.Fatalf("%s again: %s with %d blocks, want %s with %d", model, w2, n, w, want)
		}
	}

	code, body = r.get("/v1/workers")
	var wv struct {
		Workers []struct {
			Worker    string `json:"worker"`
			Model     string `json:"model"`
			BlockSize int    `json:"block_size"`
		} `json:"workers"`
		Models []struct {
			Model       string `json:"model"`
			TextRouting string `json:"text_routing"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &wv); err != nil || code != http.StatusOK {
		t.Fatalf("/v1/workers: %d %s", code, body)
	}
	for _, w := range wv.Workers {
		wantBS := 16
		if w.Model == other {
			wantBS = 32
		}
		if !slices.Contains(byModel[w.Model], w.Worker) || w.BlockSize != wantBS {
			t.Fatalf("/v1/workers row %+v", w)
		}
	}
	if len(wv.Models) != 2 || wv.Models[1].Model != other || wv.Models[1].TextRouting != "approximate" {
		t.Fatalf("/v1/workers models %+v", wv.Models)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}

// queryModel is query for model's workers.
func (r *rig) queryModel(model string, tokens []uint32) map[string]int {
	r.t.Helper()
	resp, body := r.post("/v1/query", map[string]any{"model": model, "tokens": tokens})
	if resp.StatusCode != http.StatusOK {
		r.t.Fatalf("query: %d %s", resp.StatusCode, body)
	}
	var q queryResp
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		r.t.Fatalf("query body %q: %v", body, err)
	}
	out := map[string]int{}
	for _, w := range q.Workers {
		out[w.Worker] = w.OverlapBlocks
	}
	return out
}

// A registered worker that comes back serving another model (its record
// re-put with a new model) leaves the old model's pool: its blocks stop
// counting for the old model, the old model's requests go elsewhere, and
// /v1/workers and /v1/models show it under the new one.
func TestWorkerSwitchesModel(t *testing.T) {
	const other = "org/other-model"
	r := newRig(t, rigOpt{workers: 2, plane: config.PlaneNATS})
	r.waitExact()
	p := prompts(1, 5)[0]
	w := r.complete(p, 2)
	want := len(p) / blockSize
	poll.UntilState(t, 5*time.Second, func() (bool, string) {
		n := r.query(p)[w]
		return n == want, strconv.Itoa(n) + " blocks on " + w
	}, "the prompt indexed on its worker")

	var fw *FleetWorker
	for _, x := range r.fleet.Workers {
		if x.Name == w {
			fw = x
		}
	}
	rec := fleet.WorkerRecord{ID: fleet.DeriveID(fw.Name), Name: fw.Name, Model: other, URL: fw.URL, BlockSize: fw.BlockSize,
		DPSize: 1, KVCapacityBlocks: uint64(fw.KVBlocks), Events: fleet.EventSource{Kind: fleet.EventsNATS}, Hash: fleet.DefaultHashContract()}
	if err := fw.lease.Update(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	poll.UntilState(t, 10*time.Second, func() (bool, string) {
		m, _ := r.svc.Pools().ModelOf(rec.ID)
		return m == other, "in pool " + m
	}, "the worker in the new model's pool")
	if _, ok := r.query(p)[w]; ok {
		t.Fatalf("%s still answers for the old model", w)
	}
	if n := r.queryModel(other, p)[w]; n != 0 {
		t.Fatalf("%s kept %d blocks of the old model in the new model's pool", w, n)
	}
	for range 4 {
		if got := r.complete(prompts(1, 6)[0], 2); got == w {
			t.Fatalf("an old-model request reached %s after it switched", got)
		}
	}
	code, body := r.get("/v1/models")
	if code != http.StatusOK || !strings.Contains(body, `"`+other+`"`) {
		t.Fatalf("/v1/models: %d %s", code, body)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}

// A second model with its own Hugging Face tokenizer folder (--model
// NAME=DIR): the router tokenizes its prompts with that folder's files —
// /tokenize shows Llama 3.1's ids, the default model's stay Qwen3's — and
// its text requests reach only its workers.
func TestModelTokenizerFolder(t *testing.T) {
	const llama = "meta-llama/Llama-3.1-8B-Instruct"
	dir := t.TempDir()
	gz, err := os.ReadFile("../modelfiles/testdata/llama3.1/tokenizer.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tj, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := os.ReadFile("../modelfiles/testdata/llama3.1/tokenizer_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o600) != nil || os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), tc, 0o600) != nil {
		t.Fatal("writing the model folder")
	}
	r := newRig(t, rigOpt{workers: 2, models: []FleetModel{{Name: "Qwen/Qwen3-0.6B", BlockSize: 16}, {Name: llama, BlockSize: 32}},
		cfg: func(c *config.Config) { c.Models = []config.ModelSpec{{Name: llama, TokenizerDir: dir}} }})
	tokenize := func(model string) []uint32 {
		t.Helper()
		resp, body := r.post("/tokenize", map[string]any{"model": model, "prompt": "Hello world"})
		var v struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/tokenize %s: %d %s", model, resp.StatusCode, body)
		}
		return v.Tokens
	}
	// <|begin_of_text|> "Hello" " world", as Hugging Face's tokenizer gives.
	if got := tokenize(llama); !slices.Equal(got, []uint32{128000, 9906, 1917}) {
		t.Fatalf("Llama 3.1 ids %v", got)
	}
	if got := tokenize("Qwen/Qwen3-0.6B"); !slices.Equal(got, []uint32{9707, 1879}) {
		t.Fatalf("Qwen3 ids %v", got)
	}
	resp, body := r.post("/v1/chat/completions", map[string]any{"model": llama, "max_tokens": 2,
		"messages": []map[string]string{{"role": "user", "content": "Hi there"}}})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Kvrouter-Worker") != r.fleet.Workers[1].Name {
		t.Fatalf("llama chat: %d on %q: %s", resp.StatusCode, resp.Header.Get("X-Kvrouter-Worker"), body)
	}
	poll.UntilState(t, 5*time.Second, r.noBookings, "no bookings left")
}
