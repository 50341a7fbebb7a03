package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/internal/mocker"
)

// Disaggregation modes and protocols (docs/pd.md).
const (
	// ModeAgg serves whole requests and ignores the PD fields.
	ModeAgg = "agg"
	// ModePrefill computes prompts and keeps their KV for a decode worker.
	ModePrefill = "prefill"
	// ModeDecode receives a prompt's KV from a prefill worker, then decodes.
	ModeDecode = "decode"
	// ProtocolVLLM is vLLM's NixlConnector protocol (kv_transfer_params).
	ProtocolVLLM = "vllm"
	// ProtocolSGLang is SGLang's bootstrap protocol (bootstrap_room).
	ProtocolSGLang = "sglang"
)

// Disagg configures disaggregated prefill/decode serving.
type Disagg struct {
	// Mode is agg, prefill or decode (--disaggregation-mode). Default agg.
	Mode string
	// Protocol is vllm or sglang (--disaggregation-protocol). Default vllm.
	Protocol string
	// BootstrapPort, for an SGLang prefill worker, is a second port the KV
	// side channel listens on (--disaggregation-bootstrap-port); 0 serves
	// it on the HTTP port only. Default 0.
	BootstrapPort int
	// HoldTimeout frees a prefill's kept blocks that no decode worker
	// pulled (--kv-hold-timeout). Default 60 s.
	HoldTimeout time.Duration
	// TransferTimeout bounds a decode worker's wait for the prefill side
	// (an SGLang room that never fills, a side channel that does not
	// answer); the prompt is then computed locally. Default 30 s.
	TransferTimeout time.Duration
}

// DefaultDisagg returns the aggregated defaults.
func DefaultDisagg() Disagg {
	return Disagg{Mode: ModeAgg, Protocol: ProtocolVLLM, HoldTimeout: time.Minute, TransferTimeout: 30 * time.Second}
}

func (d Disagg) validate() error {
	switch {
	case d.Mode != ModeAgg && d.Mode != ModePrefill && d.Mode != ModeDecode:
		return fmt.Errorf("disaggregation mode %q: want agg, prefill or decode", d.Mode)
	case d.Protocol != ProtocolVLLM && d.Protocol != ProtocolSGLang:
		return fmt.Errorf("disaggregation protocol %q: want vllm or sglang", d.Protocol)
	case d.BootstrapPort < 0 || d.BootstrapPort > 65535:
		return fmt.Errorf("bootstrap port %d out of range", d.BootstrapPort)
	case d.HoldTimeout <= 0 || d.TransferTimeout <= 0:
		return errors.New("kv hold and transfer timeouts must be positive")
	}
	return nil
}

// pdFields are the PD fields of a request body.
type pdFields struct {
	KVTransferParams *kvTransferParams `json:"kv_transfer_params"`
	BootstrapHost    *string           `json:"bootstrap_host"`
	BootstrapPort    *int              `json:"bootstrap_port"`
	BootstrapRoom    *uint64           `json:"bootstrap_room"`
}

// kvTransferParams is vLLM's kv_transfer_params object.
type kvTransferParams struct {
	DoRemoteDecode  bool    `json:"do_remote_decode"`
	DoRemotePrefill bool    `json:"do_remote_prefill"`
	RemoteEngineID  *string `json:"remote_engine_id"`
	RemoteBlockIDs  []int64 `json:"remote_block_ids"`
	RemoteRequestID *string `json:"remote_request_id"`
	RemoteHost      *string `json:"remote_host"`
	RemotePort      *int    `json:"remote_port"`
	TPSize          int     `json:"tp_size,omitempty"`
}

// pdPlan is what a request's PD fields make of its engine submission.
type pdPlan struct {
	hold   bool   // prefill: keep the blocks under key
	key    string // the hold's key: "req:<engine id>" (vLLM, set by keep) or "room:<n>" (SGLang)
	remote bool   // decode: the prompt's KV was received
	vllm   bool   // prefill: answer with kv_transfer_params
}

// maxHolds bounds the kept prefills and the rooms waited on.
const maxHolds = 4096

// hold is a prefill's kept blocks (or, for SGLang, the room a decode
// worker waits on before the prefill has finished).
type hold struct {
	ready  chan struct{} // closed once the blocks are held
	rank   *rank
	id     uint64 // the engine request id
	blocks []int32
	timer  *time.Timer
}

// pdState is a worker's kept prefills, by key.
type pdState struct {
	mu    sync.Mutex
	holds map[string]*hold
	addr  string // host:port of the HTTP listener, once served
}

// normal returns d with its zero fields defaulted.
func (d Disagg) normal() Disagg {
	def := DefaultDisagg()
	if d.Mode == "" {
		d.Mode = def.Mode
	}
	if d.Protocol == "" {
		d.Protocol = def.Protocol
	}
	if d.HoldTimeout == 0 {
		d.HoldTimeout = def.HoldTimeout
	}
	if d.TransferTimeout == 0 {
		d.TransferTimeout = def.TransferTimeout
	}
	return d
}

// plan reads a one-prompt request's PD fields; a decode worker receives
// the prompt's KV here.
func (w *Worker) plan(ctx context.Context, f *pdFields, tokens []uint32, r *rank) pdPlan {
	d := w.cfg.Disagg
	if d.Mode == ModeAgg {
		return pdPlan{}
	}
	switch {
	case d.Mode == ModePrefill && d.Protocol == ProtocolVLLM && f.KVTransferParams != nil && f.KVTransferParams.DoRemoteDecode:
		return pdPlan{hold: true, vllm: true}
	case d.Mode == ModePrefill && d.Protocol == ProtocolSGLang && f.BootstrapRoom != nil:
		return pdPlan{hold: true, key: "room:" + strconv.FormatUint(*f.BootstrapRoom, 10)}
	case d.Mode == ModeDecode && d.Protocol == ProtocolVLLM && f.KVTransferParams != nil && f.KVTransferParams.DoRemotePrefill:
		p := f.KVTransferParams
		if p.RemoteRequestID == nil || p.RemoteHost == nil || p.RemotePort == nil {
			return pdPlan{}
		}
		addr := net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort))
		return pdPlan{remote: w.receive(ctx, r, tokens, addr, map[string]any{"request_id": *p.RemoteRequestID})}
	case d.Mode == ModeDecode && d.Protocol == ProtocolSGLang && f.BootstrapRoom != nil && f.BootstrapHost != nil && f.BootstrapPort != nil:
		addr := net.JoinHostPort(*f.BootstrapHost, strconv.Itoa(*f.BootstrapPort))
		return pdPlan{remote: w.receive(ctx, r, tokens, addr, map[string]any{"room": *f.BootstrapRoom})}
	}
	return pdPlan{}
}

// receive pulls a prompt's KV from the prefill side at addr: it waits for
// the prefill's blocks (an SGLang room may fill after the decode request
// arrived), sleeps the transfer time of the blocks the rank does not
// hold, and releases them there. false when the prefill side did not
// deliver (the prompt is then computed locally).
func (w *Worker) receive(ctx context.Context, r *rank, tokens []uint32, addr string, key map[string]any) bool {
	d := w.cfg.Disagg
	ctx, cancel := context.WithTimeout(ctx, d.TransferTimeout)
	defer cancel()
	key["wait_ms"] = d.TransferTimeout.Milliseconds()
	var pulled struct {
		Blocks int `json:"blocks"`
	}
	if err := w.kvCall(ctx, addr, "/kv/pull", key, &pulled); err != nil {
		w.log.Warn("kv transfer: prefill side did not deliver; computing the prompt locally", "addr", addr, "err", err)
		return false
	}
	local := 0
	if err := w.onRank(ctx, r, func(e *mocker.Engine) { local = e.LocalPrefix(tokens) }); err != nil {
		return false
	}
	bs := w.cfg.Engine.BlockSize
	need := max(min(pulled.Blocks, (len(tokens)+bs-1)/bs)-local, 0)
	t := time.NewTimer(w.cfg.Engine.TransferTime(need))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	delete(key, "wait_ms")
	if err := w.kvCall(ctx, addr, "/kv/release", key, nil); err != nil {
		w.log.Warn("kv transfer: release failed; computing the prompt locally", "addr", addr, "err", err)
		return false
	}
	return true
}

// kvCall posts body to the prefill side's KV endpoint and decodes its
// answer into out.
func (w *Worker) kvCall(ctx context.Context, addr, path string, body any, out any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", path, resp.StatusCode)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(out)
}

// onRank runs fn on the rank's goroutine (the engine is not safe for
// concurrent use) and waits for it.
func (w *Worker) onRank(ctx context.Context, r *rank, fn func(*mocker.Engine)) error {
	done := make(chan struct{})
	select {
	case r.cmds <- rankCmd{call: func(e *mocker.Engine) { fn(e); close(done) }}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// entry returns the hold under key, created waiting when absent; nil
// when the table is full.
func (p *pdState) entry(key string) *hold {
	h := p.holds[key]
	if h == nil {
		if len(p.holds) >= maxHolds {
			return nil
		}
		h = &hold{ready: make(chan struct{})}
		p.holds[key] = h
	}
	return h
}

// keep records a finished prefill's held blocks under key and starts the
// timeout that frees them; it returns them for the answer.
func (w *Worker) keep(ctx context.Context, p pdPlan, r *rank, id uint64) []int32 {
	if p.vllm {
		p.key = "req:" + strconv.FormatUint(id, 10)
	}
	var blocks []int32
	if w.onRank(ctx, r, func(e *mocker.Engine) { blocks, _ = e.Held(id) }) != nil {
		w.releaseOn(r, id)
		return nil
	}
	w.pd.mu.Lock()
	defer w.pd.mu.Unlock()
	h := w.pd.entry(p.key)
	if h == nil || h.rank != nil {
		// Table full, or the key (a room) reused by a second prefill: the
		// blocks are not kept.
		w.releaseOn(r, id)
		return nil
	}
	h.rank, h.id, h.blocks = r, id, blocks
	close(h.ready)
	key := p.key
	h.timer = time.AfterFunc(w.cfg.Disagg.HoldTimeout, func() {
		if w.drop(key, h) {
			w.log.Warn("kv hold timed out: blocks freed unpulled", "key", key)
		}
	})
	return blocks
}

// drop removes h from the table if it is still there and frees its
// blocks; true when it did.
func (w *Worker) drop(key string, h *hold) bool {
	w.pd.mu.Lock()
	if w.pd.holds[key] != h {
		w.pd.mu.Unlock()
		return false
	}
	delete(w.pd.holds, key)
	w.pd.mu.Unlock()
	if h.timer != nil {
		h.timer.Stop()
	}
	if h.rank != nil {
		w.releaseOn(h.rank, h.id)
	}
	return true
}

// releaseOn frees a held request's blocks on its rank, never blocking
// for long.
func (w *Worker) releaseOn(r *rank, id uint64) {
	c := rankCmd{call: func(e *mocker.Engine) { e.Release(id) }}
	select {
	case r.cmds <- c:
	case <-time.After(time.Second):
	}
}

// kvKey reads a /kv/ request's key: {"request_id": "..."} (vLLM's
// remote_request_id) or {"room": n} (SGLang's bootstrap_room).
func kvKey(req *http.Request) (key string, wait time.Duration, err error) {
	var b struct {
		RequestID *string `json:"request_id"`
		Room      *uint64 `json:"room"`
		WaitMs    int64   `json:"wait_ms"`
	}
	if err := json.NewDecoder(io.LimitReader(req.Body, 4096)).Decode(&b); err != nil {
		return "", 0, err
	}
	wait = time.Duration(min(max(b.WaitMs, 0), 600_000)) * time.Millisecond
	switch {
	case b.RequestID != nil:
		return "req:" + *b.RequestID, 0, nil // vLLM: the blocks are held before the answer
	case b.Room != nil:
		return "room:" + strconv.FormatUint(*b.Room, 10), wait, nil
	}
	return "", 0, errors.New("want request_id or room")
}

// handleKVPull answers the blocks held under a key, waiting up to
// wait_ms for an SGLang room to fill.
func (w *Worker) handleKVPull(rw http.ResponseWriter, req *http.Request) {
	key, wait, err := kvKey(req)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	w.pd.mu.Lock()
	var h *hold
	if wait > 0 {
		h = w.pd.entry(key)
	} else {
		h = w.pd.holds[key]
	}
	w.pd.mu.Unlock()
	if h == nil {
		writeError(rw, http.StatusNotFound, "no KV held under "+key)
		return
	}
	answer := func() {
		w.pd.mu.Lock()
		n := len(h.blocks)
		w.pd.mu.Unlock()
		writeJSON(rw, http.StatusOK, map[string]any{"blocks": n})
	}
	select {
	case <-h.ready:
		answer()
		return
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-h.ready:
		answer()
	case <-t.C:
		w.forgetWaiting(key, h)
		writeError(rw, http.StatusNotFound, "no KV held under "+key+" within the wait")
	case <-req.Context().Done():
		w.forgetWaiting(key, h)
	}
}

// forgetWaiting drops a room entry nobody filled.
func (w *Worker) forgetWaiting(key string, h *hold) {
	w.pd.mu.Lock()
	defer w.pd.mu.Unlock()
	if w.pd.holds[key] == h && h.rank == nil {
		delete(w.pd.holds, key)
	}
}

// handleKVRelease frees the blocks held under a key: the decode side has
// read them.
func (w *Worker) handleKVRelease(rw http.ResponseWriter, req *http.Request) {
	key, _, err := kvKey(req)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	w.pd.mu.Lock()
	h := w.pd.holds[key]
	w.pd.mu.Unlock()
	if h == nil || h.rank == nil || !w.drop(key, h) {
		writeError(rw, http.StatusNotFound, "no KV held under "+key)
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"released": len(h.blocks)})
}

// Holds returns the number of prefills whose blocks are kept for a
// decode worker.
func (w *Worker) Holds() int {
	w.pd.mu.Lock()
	defer w.pd.mu.Unlock()
	n := 0
	for _, h := range w.pd.holds {
		if h.rank != nil {
			n++
		}
	}
	return n
}

// transferParams is a prefill answer's kv_transfer_params.
func (w *Worker) transferParams(id uint64, blocks []int32) map[string]any {
	w.pd.mu.Lock()
	addr := w.pd.addr
	w.pd.mu.Unlock()
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	ids := make([]int64, len(blocks))
	for i, b := range blocks {
		ids[i] = int64(b)
	}
	return map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": ids,
		"remote_engine_id": fmt.Sprintf("mocker-%d", w.cfg.WorkerID), "remote_request_id": strconv.FormatUint(id, 10),
		"remote_host": host, "remote_port": p, "tp_size": 1}
}

// stopHolds stops every hold's timeout once the ranks have stopped (their
// blocks go with the engines).
func (w *Worker) stopHolds() {
	w.pd.mu.Lock()
	defer w.pd.mu.Unlock()
	for k, h := range w.pd.holds {
		if h.timer != nil {
			h.timer.Stop()
		}
		delete(w.pd.holds, k)
	}
}

// HeldRequests returns how many finished requests keep blocks for a
// decode worker on the engines themselves (summed over the ranks): the
// engines' truth, where Holds counts the worker's table. It asks every
// rank's goroutine, so it needs a serving worker.
func (w *Worker) HeldRequests(ctx context.Context) (int, error) {
	n := 0
	for _, r := range w.ranks {
		if err := w.onRank(ctx, r, func(e *mocker.Engine) { n += e.HeldRequests() }); err != nil {
			return 0, err
		}
	}
	return n, nil
}
