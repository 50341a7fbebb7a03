package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/mocker"
)

// apiError is vLLM's (and OpenAI's) error body.
type apiError struct {
	Error apiErrorInfo `json:"error"`
}

type apiErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(v)
}

func writeError(rw http.ResponseWriter, code int, msg string) {
	typ := "BadRequestError"
	switch code {
	case http.StatusNotFound:
		typ = "NotFoundError"
	case http.StatusServiceUnavailable:
		typ = "ServiceUnavailableError"
	case http.StatusInternalServerError:
		typ = "InternalServerError"
	}
	writeJSON(rw, code, apiError{apiErrorInfo{Message: msg, Type: typ, Code: code}})
}

// streamOptions is OpenAI's stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// commonRequest holds the fields completions and chat share. Sampling
// parameters are accepted and ignored: output is deterministic filler.
type commonRequest struct {
	Model            string         `json:"model"`
	MaxTokens        *int           `json:"max_tokens"`
	MaxCompletionTok *int           `json:"max_completion_tokens"`
	Stream           bool           `json:"stream"`
	StreamOptions    *streamOptions `json:"stream_options"`
	IgnoreEOS        bool           `json:"ignore_eos"`
	N                *int           `json:"n"`
	DPRank           *int           `json:"data_parallel_rank"`
	pdFields
	CacheSalt *string `json:"cache_salt"`
}

type completionRequest struct {
	commonRequest
	Prompt json.RawMessage `json:"prompt"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type chatRequest struct {
	commonRequest
	chatFields
}

// chatFields are the parts of a chat body that decide the rendered prompt;
// messages and tools stay raw so that a chat template sees their key order.
type chatFields struct {
	Messages             json.RawMessage `json:"messages"`
	Tools                json.RawMessage `json:"tools"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
}

// empty reports whether no messages were given.
func (c *chatFields) empty() bool {
	m := bytes.TrimSpace(c.Messages)
	return len(m) == 0 || string(m) == "null" || string(m) == "[]"
}

// renderChat renders the conversation with the configured chat template
// (as vLLM's server does), or with the ChatML fallback without one.
func (w *Worker) renderChat(c *chatFields) (string, error) {
	if w.cfg.ChatTemplate == nil {
		var msgs []chatMessage
		if err := json.Unmarshal(c.Messages, &msgs); err != nil {
			return "", errors.New("messages must be a list of message objects")
		}
		return renderChatML(msgs)
	}
	absent := func(raw json.RawMessage) bool {
		raw = bytes.TrimSpace(raw)
		return len(raw) == 0 || string(raw) == "null"
	}
	cr := &chattemplate.ChatRequest{Messages: c.Messages, AddGenerationPrompt: c.AddGenerationPrompt,
		ContinueFinalMessage: c.ContinueFinalMessage}
	if !absent(c.Tools) {
		cr.Tools = c.Tools
	}
	if !absent(c.ChatTemplateKwargs) {
		cr.ChatTemplateKwargs = c.ChatTemplateKwargs
	}
	o := cr.Options()
	o.Preprocess = chattemplate.PreprocessVLLM
	return w.cfg.ChatTemplate.Render(cr.Messages, cr.Tools, o)
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details"`
}

// decodeBody reads a JSON body with the size limit.
func (w *Worker) decodeBody(rw http.ResponseWriter, req *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(rw, req.Body, w.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
			return false
		}
		writeError(rw, http.StatusBadRequest, "reading request body: "+err.Error())
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(rw, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// checkCommon validates the shared fields and returns max tokens (def when
// unset) and the requested rank (-1: any).
func (w *Worker) checkCommon(rw http.ResponseWriter, req *http.Request, c *commonRequest, def int) (int, int, bool) {
	if c.Model != "" && c.Model != w.cfg.servedName() && !w.cfg.adapter(c.Model) {
		writeError(rw, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", c.Model))
		return 0, 0, false
	}
	if c.CacheSalt != nil && *c.CacheSalt == "" {
		writeError(rw, http.StatusBadRequest, "Parameter 'cache_salt' must be a non-empty string if provided.")
		return 0, 0, false
	}
	if c.N != nil && *c.N != 1 {
		writeError(rw, http.StatusBadRequest, "n must be 1 for the mock engine")
		return 0, 0, false
	}
	maxTok := def
	if c.MaxTokens != nil {
		maxTok = *c.MaxTokens
	} else if c.MaxCompletionTok != nil {
		maxTok = *c.MaxCompletionTok
	}
	if maxTok < 1 {
		writeError(rw, http.StatusBadRequest, fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTok))
		return 0, 0, false
	}
	dp := -1
	if h := req.Header.Get("X-Data-Parallel-Rank"); h != "" {
		v, err := strconv.Atoi(h)
		if err != nil || v < 0 {
			writeError(rw, http.StatusBadRequest, "invalid X-Data-Parallel-Rank header "+strconv.Quote(h))
			return 0, 0, false
		}
		dp = v
	} else if c.DPRank != nil {
		dp = *c.DPRank
	}
	return maxTok, dp, true
}

// parsePrompt reads OpenAI's prompt: a string, a list of strings, a list of
// token ids, or a list of lists of token ids.
func (w *Worker) parsePrompt(raw json.RawMessage) ([][]uint32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		ids, err := w.encode(s, true)
		return [][]uint32{ids}, err
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) > maxBatchPrompts {
			return nil, fmt.Errorf("a batch holds at most %d prompts, got %d", maxBatchPrompts, len(ss))
		}
		out := make([][]uint32, len(ss))
		for i, p := range ss {
			ids, err := w.encode(p, true)
			if err != nil {
				return nil, err
			}
			out[i] = ids
		}
		return out, nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		t, err := w.checkIDs(ids)
		return [][]uint32{t}, err
	}
	var idss [][]int64
	if json.Unmarshal(raw, &idss) == nil {
		out := make([][]uint32, len(idss))
		for i, p := range idss {
			t, err := w.checkIDs(p)
			if err != nil {
				return nil, err
			}
			out[i] = t
		}
		return out, nil
	}
	return nil, errors.New("prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
}

// limitedEncoder is optionally implemented by a Tokenizer
// (*tokenizer.Tokenizer does): EncodeLimit stops at the first token past
// limit, so a prompt far longer than the model costs the work of the
// model's length, not of the prompt.
type limitedEncoder interface {
	EncodeLimit(text string, addSpecialTokens bool, limit int) ([]uint32, bool)
}

// encode tokenizes a prompt, refusing one longer than the context.
func (w *Worker) encode(text string, special bool) ([]uint32, error) {
	limit := w.cfg.maxModelLen()
	if le, ok := w.tok.(limitedEncoder); ok {
		ids, ok := le.EncodeLimit(text, special, limit)
		if !ok {
			return nil, vllmText(fmt.Sprintf("This model's maximum context length is %d tokens. However, your prompt has more than %d tokens. Please reduce the length of the prompt.", limit, limit))
		}
		return ids, nil
	}
	return w.tok.Encode(text, special), nil
}

func (w *Worker) checkIDs(ids []int64) ([]uint32, error) {
	out := make([]uint32, len(ids))
	for i, v := range ids {
		if v < 0 || v >= int64(w.tok.VocabSize()) {
			return nil, vllmText(fmt.Sprintf("Token id %d is out of vocabulary", v))
		}
		out[i] = uint32(v)
	}
	return out, nil
}

// maxBatchPrompts bounds the prompts of one completions request.
const maxBatchPrompts = 1024

// vllmText is an error whose text is vLLM's own, word for word (capitals
// and full stops included), so clients that match on it see what a real
// engine says; Go's error-string conventions do not apply to it.
type vllmText string

func (e vllmText) Error() string { return string(e) }

// checkLength applies vLLM's prompt checks.
func (w *Worker) checkLength(prompts [][]uint32, maxTok int) error {
	if len(prompts) == 0 {
		return errors.New("prompt is required")
	}
	if len(prompts) > maxBatchPrompts {
		return fmt.Errorf("a batch holds at most %d prompts, got %d", maxBatchPrompts, len(prompts))
	}
	limit := w.cfg.maxModelLen()
	for _, p := range prompts {
		if len(p) == 0 {
			return vllmText("The prompt cannot be empty.")
		}
		// A difference, not a sum: len(p)+maxTok overflows for a
		// max_tokens near 2^63.
		if maxTok > limit-len(p) {
			total := len(p) + maxTok
			if total < 0 {
				total = math.MaxInt
			}
			return vllmText(fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
				limit, total, len(p), maxTok))
		}
	}
	return nil
}

func newID(prefix string) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return prefix + hex.EncodeToString(b[:])
}

func (w *Worker) handleCompletions(rw http.ResponseWriter, req *http.Request) {
	var body completionRequest
	if !w.decodeBody(rw, req, &body) {
		return
	}
	maxTok, dp, ok := w.checkCommon(rw, req, &body.commonRequest, 16)
	if !ok {
		return
	}
	prompts, err := w.parsePrompt(body.Prompt)
	if err == nil {
		err = w.checkLength(prompts, maxTok)
	}
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	w.generate(rw, req, &body.commonRequest, prompts, maxTok, dp, false)
}

// renderChatML is the fallback chat rendering when no chat template is
// configured: ChatML, as Qwen models use, ending with the assistant header.
func renderChatML(msgs []chatMessage) (string, error) {
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", fmt.Errorf("messages[%d].role is required", i)
		}
		text, err := messageText(m.Content)
		if err != nil {
			return "", fmt.Errorf("messages[%d].content: %w", i, err)
		}
		fmt.Fprintf(&b, "<|im_start|>%s\n%s<|im_end|>\n", m.Role, text)
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String(), nil
}

// messageText reads a message's content: a string, null, or a list of
// parts of which the text parts are joined.
func messageText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or a list of content parts")
	}
	var texts []string
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content part type %q is not supported by the mock engine", p.Type)
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

func (w *Worker) handleChat(rw http.ResponseWriter, req *http.Request) {
	var body chatRequest
	if !w.decodeBody(rw, req, &body) {
		return
	}
	maxTok, dp, ok := w.checkCommon(rw, req, &body.commonRequest, 16)
	if !ok {
		return
	}
	if body.empty() {
		writeError(rw, http.StatusBadRequest, "messages must be a non-empty list")
		return
	}
	text, err := w.renderChat(&body.chatFields)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	ids, err := w.encode(text, false)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	prompts := [][]uint32{ids}
	if err := w.checkLength(prompts, maxTok); err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	w.generate(rw, req, &body.commonRequest, prompts, maxTok, dp, true)
}

// choiceState accumulates one prompt's generation.
type choiceState struct {
	id      uint64
	st      *stream
	prompt  int
	cached  int
	gen     int
	text    strings.Builder
	ids     []uint32
	done    bool
	started bool
}

// generate submits every prompt and answers, streamed or whole.
func (w *Worker) generate(rw http.ResponseWriter, req *http.Request, c *commonRequest, prompts [][]uint32, maxTok, dp int, chat bool) {
	r, err := w.pickRank(dp)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	g := &generation{w: w, rw: rw, rank: r, notify: make(chan struct{}, 1), chat: chat}
	if len(prompts) == 1 {
		g.pd = w.plan(req.Context(), &c.pdFields, prompts[0], r)
		if g.pd.hold && w.cfg.Disagg.Protocol == ProtocolSGLang {
			maxTok = 1 // an SGLang prefill server only prefills
		}
	}
	if w.cfg.adapter(c.Model) {
		g.lora = c.Model
	}
	if c.CacheSalt != nil {
		g.salt = *c.CacheSalt
	}
	if err := g.submit(req.Context(), prompts, maxTok); err != nil {
		writeError(rw, http.StatusServiceUnavailable, "worker unavailable: "+err.Error())
		return
	}
	finished := false
	defer func() {
		if !finished {
			g.abortUnfinished()
			if g.pd.hold {
				w.releaseOn(r, g.choices[0].id) // finished but never answered
			}
		}
	}()
	g.start(c.Stream)
	if !g.collect(req.Context()) {
		return
	}
	finished = true
	defer w.finished()
	var params map[string]any
	if g.pd.hold {
		blocks := w.keep(req.Context(), g.pd, r, g.choices[0].id)
		if g.pd.vllm && blocks != nil {
			params = w.transferParams(g.choices[0].id, blocks)
		}
	}
	u := g.usage()
	if g.sse != nil {
		if c.StreamOptions != nil && c.StreamOptions.IncludeUsage {
			g.sse.event(map[string]any{"id": g.id, "object": g.object, "created": g.created, "model": g.model,
				"choices": []any{}, "usage": u})
		}
		g.sse.done()
		return
	}
	whole := g.whole(u)
	if params != nil {
		whole["kv_transfer_params"] = params
	}
	writeJSON(rw, http.StatusOK, whole)
}

// generation is one request's prompts on their way through a rank's
// engine, and the answer being built from their tokens.
type generation struct {
	w       *Worker
	rw      http.ResponseWriter
	rank    *rank
	notify  chan struct{} // signalled when any choice has new output
	choices []*choiceState
	chat    bool
	pd      pdPlan
	lora    string // the LoRA adapter, "" for the base model
	salt    string // the cache_salt, "" for none

	// Set by start.
	sse        *sseWriter // nil when the answer is sent whole
	id, object string
	model      string
	created    int64
}

// submit hands every prompt to the rank's engine; when one cannot be
// submitted, the ones already submitted are aborted.
func (g *generation) submit(ctx context.Context, prompts [][]uint32, maxTok int) error {
	g.choices = make([]*choiceState, len(prompts))
	for i, p := range prompts {
		id, st, err := g.w.submit(ctx, g.rank, mocker.Request{Tokens: p, MaxTokens: maxTok, Hold: g.pd.hold, Remote: g.pd.remote, LoRA: g.lora, CacheSalt: g.salt}, g.notify)
		if err != nil {
			for _, ch := range g.choices[:i] {
				g.w.abort(g.rank, ch.id)
			}
			return err
		}
		g.choices[i] = &choiceState{id: id, st: st, prompt: len(p)}
	}
	return nil
}

// abortUnfinished aborts the choices the engine has not finished (the
// client left or the engine failed).
func (g *generation) abortUnfinished() {
	for _, ch := range g.choices {
		if !ch.done {
			g.w.abort(g.rank, ch.id)
		}
	}
}

// start names the answer (id, object, creation time, model) and, for a
// stream, sends its headers.
func (g *generation) start(stream bool) {
	g.id, g.object = newID("cmpl-"), "text_completion"
	if g.chat {
		g.id, g.object = newID("chatcmpl-"), "chat.completion"
	}
	g.created = time.Now().Unix()
	g.model = g.w.cfg.servedName()
	if stream {
		g.sse = newSSE(g.rw)
		if g.chat {
			g.object = "chat.completion.chunk"
		}
	}
}

// collect takes every choice's tokens as the engine produces them (sent
// at once when streaming, kept otherwise) until every choice is done. It
// returns false when the request ended first: the client left, or the
// engine failed (the client is told).
func (g *generation) collect(ctx context.Context) bool {
	var buf []mocker.Output
	for {
		all := true
		for i, ch := range g.choices {
			if ch.done {
				continue
			}
			var end bool
			var err error
			buf, end, err = ch.st.take(buf)
			if err != nil {
				g.engineFailed(err)
				return false
			}
			g.add(i, ch, buf)
			if end {
				ch.done = true
			} else {
				all = false
			}
		}
		if g.sse != nil {
			g.sse.flush()
		}
		if all {
			return true
		}
		select {
		case <-g.notify:
		case <-ctx.Done():
			return false
		}
	}
}

// add records choice i's new tokens and streams them, or keeps their text
// for the whole answer.
func (g *generation) add(i int, ch *choiceState, outs []mocker.Output) {
	for _, o := range outs {
		ch.gen = o.Generated
		ch.cached = o.CachedTokens
		piece := g.w.tok.Decode([]uint32{o.Token})
		ch.ids = append(ch.ids, o.Token)
		if g.sse != nil {
			g.sse.event(g.w.chunk(g.id, g.object, g.created, g.model, i, piece, o.Finished, g.chat, !ch.started))
			ch.started = true
		} else {
			ch.text.WriteString(piece)
		}
	}
}

// engineFailed tells the client that the engine failed: in-band when
// streaming, as a 500 otherwise.
func (g *generation) engineFailed(err error) {
	if g.sse != nil {
		g.sse.event(apiError{apiErrorInfo{Message: err.Error(), Type: "InternalServerError", Code: 500}})
		return
	}
	writeError(g.rw, http.StatusInternalServerError, err.Error())
}

// usage sums the choices' token counts.
func (g *generation) usage() usage {
	u := usage{PromptTokensDetails: &promptDetails{}}
	for _, ch := range g.choices {
		u.PromptTokens += ch.prompt
		u.CompletionTokens += ch.gen
		u.PromptTokensDetails.CachedTokens += ch.cached
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// whole is the answer sent in one body, in the completion or chat shape.
func (g *generation) whole(u usage) map[string]any {
	list := make([]any, len(g.choices))
	for i, ch := range g.choices {
		if g.chat {
			list[i] = map[string]any{"index": i, "message": map[string]any{"role": "assistant", "content": ch.text.String()},
				"logprobs": nil, "finish_reason": "length", "stop_reason": nil}
		} else {
			list[i] = map[string]any{"index": i, "text": ch.text.String(), "logprobs": nil,
				"finish_reason": "length", "stop_reason": nil}
		}
	}
	return map[string]any{"id": g.id, "object": g.object, "created": g.created, "model": g.model, "usage": u, "choices": list}
}

// chunk is one streamed token, in the completion or chat chunk shape.
func (w *Worker) chunk(id, object string, created int64, model string, index int, text string, last, chat, first bool) any {
	var finish any
	if last {
		finish = "length"
	}
	var choice map[string]any
	if chat {
		delta := map[string]any{"content": text}
		if first {
			delta["role"] = "assistant"
		}
		choice = map[string]any{"index": index, "delta": delta, "logprobs": nil, "finish_reason": finish}
	} else {
		choice = map[string]any{"index": index, "text": text, "logprobs": nil, "finish_reason": finish}
	}
	return map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{choice}}
}

// sseWriter writes server-sent events.
type sseWriter struct {
	rw http.ResponseWriter
	fl http.Flusher
}

func newSSE(rw http.ResponseWriter) *sseWriter {
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	fl, _ := rw.(http.Flusher)
	return &sseWriter{rw: rw, fl: fl}
}

func (s *sseWriter) event(v any) {
	b, _ := json.Marshal(v)
	_, _ = s.rw.Write([]byte("data: "))
	_, _ = s.rw.Write(b)
	_, _ = s.rw.Write([]byte("\n\n"))
}

func (s *sseWriter) flush() {
	if s.fl != nil {
		s.fl.Flush()
	}
}

func (s *sseWriter) done() {
	_, _ = s.rw.Write([]byte("data: [DONE]\n\n"))
	s.flush()
}

func (w *Worker) handleModels(rw http.ResponseWriter, _ *http.Request) {
	data := []any{map[string]any{
		"id": w.cfg.servedName(), "object": "model", "created": w.started.Unix(), "owned_by": "vllm",
		"root": w.cfg.Model, "parent": nil, "max_model_len": w.cfg.maxModelLen(),
	}}
	for _, a := range w.cfg.LoRAAdapters { // as vLLM lists loaded adapters
		data = append(data, map[string]any{"id": a, "object": "model", "created": w.started.Unix(), "owned_by": "vllm",
			"root": a, "parent": w.cfg.servedName(), "max_model_len": w.cfg.maxModelLen()})
	}
	writeJSON(rw, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (w *Worker) handleTokenize(rw http.ResponseWriter, req *http.Request) {
	var body struct {
		chatFields
		Model   string  `json:"model"`
		Prompt  *string `json:"prompt"`
		Special *bool   `json:"add_special_tokens"`
	}
	if !w.decodeBody(rw, req, &body) {
		return
	}
	if body.Model != "" && body.Model != w.cfg.servedName() && !w.cfg.adapter(body.Model) {
		writeError(rw, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist.", body.Model))
		return
	}
	var ids []uint32
	switch {
	case body.Prompt != nil:
		var err error
		if ids, err = w.encode(*body.Prompt, body.Special == nil || *body.Special); err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
	case !body.empty():
		text, err := w.renderChat(&body.chatFields)
		if err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
		if ids, err = w.encode(text, false); err != nil {
			writeError(rw, http.StatusBadRequest, err.Error())
			return
		}
	default:
		writeError(rw, http.StatusBadRequest, "either prompt or messages is required")
		return
	}
	if ids == nil {
		ids = []uint32{}
	}
	writeJSON(rw, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": w.cfg.maxModelLen(),
		"tokens": ids, "token_strs": nil})
}

func (w *Worker) handleDetokenize(rw http.ResponseWriter, req *http.Request) {
	var body struct {
		Tokens []int64 `json:"tokens"`
	}
	if !w.decodeBody(rw, req, &body) {
		return
	}
	ids, err := w.checkIDs(body.Tokens)
	if err != nil {
		writeError(rw, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"prompt": w.tok.Decode(ids)})
}

// handleReset drops every rank's prefix cache (AllBlocksCleared), like
// vLLM's /reset_prefix_cache; 400 while requests are in flight.
func (w *Worker) handleReset(rw http.ResponseWriter, req *http.Request) {
	for _, r := range w.ranks {
		reply := make(chan error, 1)
		if err := sendCmd(req.Context(), r, rankCmd{reset: reply}); err != nil {
			writeError(rw, http.StatusServiceUnavailable, err.Error())
			return
		}
		select {
		case err := <-reply:
			if err != nil {
				writeError(rw, http.StatusBadRequest, "cannot reset the prefix cache: "+err.Error())
				return
			}
		case <-req.Context().Done():
			return
		}
	}
	rw.WriteHeader(http.StatusOK)
}

func sendCmd(ctx context.Context, r *rank, c rankCmd) error {
	select {
	case r.cmds <- c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
