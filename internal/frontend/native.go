package frontend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/kvrouter/kvrouter/internal/index"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (f *Frontend) handleModels(rw http.ResponseWriter, _ *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	created := f.clock().Unix()
	var list []model
	for _, id := range f.modelIDs() {
		list = append(list, model{ID: id, Object: "model", Created: created, OwnedBy: "kvrouter"})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"object": "list", "data": list})
}

func (f *Frontend) handleHealth(rw http.ResponseWriter, _ *http.Request) {
	writeJSON(rw, http.StatusOK, map[string]string{"status": "ok"})
}

func (f *Frontend) handleReady(rw http.ResponseWriter, _ *http.Request) {
	if err := f.ready(); err != nil {
		writeJSON(rw, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
		return
	}
	writeJSON(rw, http.StatusOK, map[string]string{"status": "ready"})
}

func (f *Frontend) handleMetrics(rw http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{}).ServeHTTP(rw, r)
}

// nativeRequest is the body of /v1/route and /v1/query: exactly one of
// tokens, block_hashes (query only), prompt or messages.
type nativeRequest struct {
	Model       string          `json:"model"`
	Tokens      json.RawMessage `json:"tokens"`
	BlockHashes []uint64        `json:"block_hashes"`
	Prompt      json.RawMessage `json:"prompt"`
	Messages    json.RawMessage `json:"messages"`
	LoRAName    string          `json:"lora_name"`
	CacheSalt   *string         `json:"cache_salt"`
	MaxTokens   *int            `json:"max_tokens"`
	// pool is the model's pool ("" the default model); approx says the
	// tokens are textTokens.
	pool   string
	lora   string
	approx bool
}

// request is the router's request for nr's tokens.
func (nr *nativeRequest) request(id string, tokens []uint32) router.Request {
	lora := nr.LoRAName
	if nr.lora != "" {
		lora = nr.lora
	}
	req := router.Request{ID: id, Model: nr.pool, Tokens: tokens, LoRAName: lora, Namespace: salt(nr.CacheSalt),
		ExpectedOutputTokens: nr.expectedOutput()}
	if nr.approx {
		req.Namespace = textNamespace + req.Namespace
	}
	return req
}

// promptParam is the field that carries the request's prompt, for errors.
func (nr *nativeRequest) promptParam() string {
	switch {
	case present(nr.Tokens):
		return "tokens"
	case nr.BlockHashes != nil:
		return "block_hashes"
	case present(nr.Messages):
		return "messages"
	}
	return "prompt"
}

// expectedOutput is max_tokens, 0 when absent.
func (nr *nativeRequest) expectedOutput() int {
	if nr.MaxTokens == nil {
		return 0
	}
	return *nr.MaxTokens
}

func present(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && string(raw) != "null"
}

// nativeTokens reads a native request's prompt as token ids; hashes is
// true when block_hashes was given instead (query only).
func (f *Frontend) nativeTokens(body []byte, allowHashes bool) (nr nativeRequest, tokens []uint32, err error) {
	if err := json.Unmarshal(body, &nr); err != nil {
		if fe, ok := jsonTypeError(err); ok {
			return nr, nil, fe
		}
		return nr, nil, fmt.Errorf("invalid JSON body: %v: %w", err, ErrBadRequest)
	}
	pp, pool, err := f.parserFor(nr.Model)
	if err != nil {
		return nr, nil, err
	}
	nr.pool, nr.lora = pool, f.loraOf(nr.Model)
	if err := checkRange("max_tokens", nr.MaxTokens, 1, f.parser.maxOutput); err != nil {
		return nr, nil, err
	}
	if err := checkSalt(nr.CacheSalt); err != nil {
		return nr, nil, err
	}
	n := 0
	for _, ok := range []bool{present(nr.Tokens), nr.BlockHashes != nil, present(nr.Prompt), present(nr.Messages)} {
		if ok {
			n++
		}
	}
	if n != 1 {
		what := "tokens, prompt or messages"
		if allowHashes {
			what = "tokens, block_hashes, prompt or messages"
		}
		return nr, nil, fmt.Errorf("give exactly one of %s: %w", what, ErrBadRequest)
	}
	switch {
	case nr.BlockHashes != nil:
		if !allowHashes {
			return nr, nil, fmt.Errorf("block_hashes are accepted by /v1/query only: %w", ErrBadRequest)
		}
		return nr, nil, nil
	case present(nr.Tokens):
		ids, err := tokenIDs(nr.Tokens)
		if err != nil {
			return nr, nil, fmt.Errorf("tokens: %w", err)
		}
		return nr, ids, pp.checkCount(len(ids))
	case present(nr.Prompt):
		p, err := pp.completionPrompt(nr.Prompt)
		nr.approx = pp.approxText() && !p.fromIDs
		return nr, p.tokens, err
	default:
		fields, err := parseFields(body)
		if err != nil {
			return nr, nil, fmt.Errorf("invalid JSON body: %v: %w", err, ErrBadRequest)
		}
		p, err := pp.chatPrompt(&fields)
		nr.approx = pp.approxChat()
		return nr, p.tokens, err
	}
}

// errAnswered says the client was answered already (or left).
var errAnswered = errors.New("answered")

// nativeTokensSlot is nativeTokens under a tokenization slot for a large
// body; errAnswered means the 503 was written or the client left.
func (f *Frontend) nativeTokensSlot(rw http.ResponseWriter, r *http.Request, body []byte, allowHashes bool) (nativeRequest, []uint32, error) {
	release, ok := f.tokenSlot(rw, r, len(body))
	if !ok {
		return nativeRequest{}, nil, errAnswered
	}
	defer release()
	return f.nativeTokens(body, allowHashes)
}

// handleRoute answers the decision a completion request would get now,
// with the full per-worker explanation, without forwarding or booking.
func (f *Frontend) handleRoute(rw http.ResponseWriter, r *http.Request) {
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	nr, tokens, err := f.nativeTokensSlot(rw, r, body, false)
	if errors.Is(err, errAnswered) {
		return
	}
	if err != nil {
		writeParseError(rw, err, nr.promptParam())
		return
	}
	t0 := f.clock()
	var pd *pdJSON
	var d router.Decision
	req := nr.request("plan", tokens)
	req.AllowedWorkers = f.adapterWorkers(nr.lora)
	if f.disaggregated() {
		d, pd, err = f.planPD(req)
	} else {
		d, err = f.router.Plan(req)
	}
	f.m.decision.Observe(f.clock().Sub(t0).Seconds())
	if err != nil {
		v := f.decisionView(d, false)
		v.RequestID = ""
		f.writeRouteError(rw, err, map[string]any{"decision": v})
		return
	}
	v := f.decisionView(d, true)
	v.RequestID, v.PD = "", pd
	writeJSON(rw, http.StatusOK, v)
}

// queryRank is one worker rank's row of /v1/query.
type queryRank struct {
	Worker        string    `json:"worker"`
	WorkerID      uint64    `json:"worker_id"`
	DPRank        uint32    `json:"dp_rank"`
	OverlapBlocks int       `json:"overlap_blocks"`
	Tiers         tiersJSON `json:"tiers"`
	State         string    `json:"state"`
}

// queryResponse is the body of /v1/query.
type queryResponse struct {
	BlockSize int         `json:"block_size"`
	Blocks    int         `json:"blocks"`
	Workers   []queryRank `json:"workers"`
}

// handleQuery answers every worker rank's cached prefix of a prompt.
func (f *Frontend) handleQuery(rw http.ResponseWriter, r *http.Request) {
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	nr, tokens, err := f.nativeTokensSlot(rw, r, body, f.idx != nil)
	if errors.Is(err, errAnswered) {
		return
	}
	if err != nil {
		writeParseError(rw, err, nr.promptParam())
		return
	}
	resp := queryResponse{BlockSize: f.poolBlockSize(nr.pool), Workers: []queryRank{}}
	byRank := map[kvevent.WorkerRank]queryRank{}
	for _, l := range f.router.Loads() {
		if f.inPool(l.Worker.ID, nr.pool) {
			byRank[l.Worker] = f.queryRow(l.Worker, 0, scoreTiers(index.Score{}))
		}
	}
	if f.idx != nil {
		local := nr.BlockHashes
		if local == nil {
			local, err = f.router.LocalHashes(nr.request("", tokens))
			if err != nil {
				writeError(rw, http.StatusBadRequest, typeInvalidRequest, "", "", err.Error())
				return
			}
		}
		resp.Blocks = len(local)
		var sc index.Scores
		f.idx.Query(local, &sc)
		for _, s := range sc.List {
			if f.inPool(s.Worker.ID, nr.pool) {
				byRank[s.Worker] = f.queryRow(s.Worker, int(s.Blocks), scoreTiers(s))
			}
		}
	} else {
		// Plan explains every rank even when it refuses (all busy).
		d, _ := f.router.Plan(nr.request("query", tokens))
		resp.Blocks = d.Blocks
		for _, c := range d.Candidates {
			// The plan merges disk and external tiers; they show as disk.
			t := tiersJSON{"device": c.Overlap.Device, "host_pinned": c.Overlap.Host, "disk": c.Overlap.Disk, "external": 0}
			byRank[c.Worker] = f.queryRow(c.Worker, c.Overlap.Device+c.Overlap.Host+c.Overlap.Disk, t)
		}
	}
	for _, q := range byRank {
		resp.Workers = append(resp.Workers, q)
	}
	slices.SortFunc(resp.Workers, func(a, b queryRank) int {
		if a.OverlapBlocks != b.OverlapBlocks {
			return b.OverlapBlocks - a.OverlapBlocks
		}
		if a.WorkerID != b.WorkerID {
			if a.WorkerID < b.WorkerID {
				return -1
			}
			return 1
		}
		return int(a.DPRank) - int(b.DPRank)
	})
	writeJSON(rw, http.StatusOK, resp)
}

func (f *Frontend) queryRow(w kvevent.WorkerRank, blocks int, tiers tiersJSON) queryRank {
	e, _ := f.dir.Lookup(w.ID)
	name := e.Name
	if name == "" {
		name = w.String()
	}
	return queryRank{Worker: name, WorkerID: uint64(w.ID), DPRank: uint32(w.Rank), OverlapBlocks: blocks,
		Tiers: tiers, State: e.Status.State.String()}
}

// workerJSON is one worker of /v1/workers.
type workerJSON struct {
	Worker           string     `json:"worker"`
	WorkerID         uint64     `json:"worker_id"`
	Model            string     `json:"model,omitempty"`
	URL              string     `json:"url"`
	State            string     `json:"state"`
	Reason           string     `json:"reason,omitempty"`
	Since            *time.Time `json:"since,omitempty"`
	Down             bool       `json:"down"`
	Mode             string     `json:"mode,omitempty"`
	Role             string     `json:"role,omitempty"`
	BlockSize        int        `json:"block_size,omitempty"`
	KVCapacityBlocks int        `json:"kv_capacity_blocks,omitempty"`
	LastSequence     *uint64    `json:"last_sequence"`
	Ranks            []rankJSON `json:"ranks"`
}

// rankJSON is one dp rank's load and cache size.
type rankJSON struct {
	DPRank              uint32  `json:"dp_rank"`
	ActiveRequests      int     `json:"active_requests"`
	ActivePrefillTokens int     `json:"active_prefill_tokens"`
	ActiveBlocks        float64 `json:"active_blocks"`
	IndexedBlocks       *int    `json:"indexed_blocks"`
	// TimeModel is the rank's fitted time model, once it has one.
	TimeModel *timeModelJSON `json:"time_model,omitempty"`
}

// workerViews merges the directory, the router's worker table and loads.
func (f *Frontend) workerViews() []workerJSON {
	infos, down := f.router.Workers()
	loads := f.router.Loads()
	counter, _ := f.idx.(indexedCounter)
	seen := map[kvevent.WorkerID]int{}
	var out []workerJSON
	add := func(id kvevent.WorkerID) *workerJSON {
		if i, ok := seen[id]; ok {
			return &out[i]
		}
		e, _ := f.dir.Lookup(id)
		w := workerJSON{Worker: e.Name, WorkerID: uint64(id), Model: f.workerModel(id), URL: e.URL, State: e.Status.State.String(),
			Reason: e.Status.Reason, Ranks: []rankJSON{}}
		if w.Worker == "" {
			w.Worker = fmt.Sprint(uint64(id))
		}
		if !e.Status.Since.IsZero() {
			s := e.Status.Since.UTC()
			w.Since = &s
		}
		if e.HasSequence {
			s := e.LastSequence
			w.LastSequence = &s
		}
		seen[id] = len(out)
		out = append(out, w)
		return &out[len(out)-1]
	}
	for _, e := range f.dir.List() {
		add(e.ID)
	}
	for i, info := range infos {
		w := add(info.ID)
		w.Down = down[i]
		w.BlockSize, w.KVCapacityBlocks = info.BlockSize, info.KVCapacityBlocks
		w.Mode, w.Role = "exact", info.Role.String()
		if info.Mode == router.Approximate {
			w.Mode = "approximate"
		}
	}
	models := timeModelsByRank(f.router.TimeModels())
	for _, l := range loads {
		w := add(l.Worker.ID)
		rk := rankJSON{DPRank: uint32(l.Worker.Rank), ActiveRequests: l.ActiveRequests,
			ActivePrefillTokens: l.ActivePrefillTokens, ActiveBlocks: l.ActiveBlocks, TimeModel: models[l.Worker]}
		if counter != nil {
			n := counter.Indexed(l.Worker)
			rk.IndexedBlocks = &n
		}
		w.Ranks = append(w.Ranks, rk)
	}
	return out
}

func (f *Frontend) handleWorkers(rw http.ResponseWriter, r *http.Request) {
	views := f.workerViews()
	v := map[string]any{"block_size": f.blockSize, "total": len(views), "workers": pageWorkers(views, r.URL.Query())}
	if m := f.modelViews(views); m != nil {
		v["models"] = m
	}
	writeJSON(rw, http.StatusOK, v)
}
