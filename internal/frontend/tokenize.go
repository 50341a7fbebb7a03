package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
)

// tokenizeRequest is the body of POST /tokenize, vLLM's
// TokenizeCompletionRequest ("prompt") or TokenizeChatRequest
// ("messages") with the same fields and defaults.
type tokenizeRequest struct {
	Model                string          `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage bool            `json:"continue_final_message"`
	ReturnTokenStrs      bool            `json:"return_token_strs"`
	Tools                json.RawMessage `json:"tools"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs"`
}

// tokenizeResponse is vLLM's TokenizeResponse.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// detokenizer is optionally implemented by a Tokenizer (*tokenizer.Tokenizer
// does): /detokenize needs it.
type detokenizer interface {
	Decode(ids []uint32) string
}

// errNoTokenizer refuses /tokenize and /detokenize for a model the router
// has no tokenizer for.
var errNoTokenizer = errors.New("the router has no tokenizer for this model (its text prompts are routed by a hash of the text)")

// handleTokenize answers POST /tokenize: the token ids the router
// computes for a prompt or a conversation, in vLLM's shape, so that
// operators can compare them with their engine's /tokenize.
func (f *Frontend) handleTokenize(rw http.ResponseWriter, r *http.Request) {
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		if fe, ok := jsonTypeError(err); ok {
			writeParseError(rw, fe, "")
			return
		}
		writeError(rw, http.StatusBadRequest, typeInvalidRequest, codeInvalidJSON, "", "invalid JSON body: "+err.Error())
		return
	}
	param := "prompt"
	if req.Prompt == nil {
		param = "messages"
	}
	pp, _, err := f.parserFor(req.Model)
	if err == nil && pp.approxText() {
		err = &fieldError{param: "model", msg: fmt.Sprintf("model %q: %v", req.Model, errNoTokenizer)}
	}
	if err != nil {
		writeParseError(rw, err, "model")
		return
	}
	release, ok := f.tokenSlot(rw, r, len(body))
	if !ok {
		return
	}
	ids, err := pp.tokenize(&req)
	release()
	if err != nil {
		writeParseError(rw, err, param)
		return
	}
	resp := tokenizeResponse{Count: len(ids), MaxModelLen: pp.maxTokens, Tokens: ids}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	if v, ok := pp.tok.(vocabulary); ok && req.ReturnTokenStrs {
		resp.TokenStrs = make([]string, len(ids))
		for i, id := range ids {
			resp.TokenStrs[i], _ = v.IDToToken(id)
		}
	}
	writeJSON(rw, http.StatusOK, resp)
}

// tokenize encodes a /tokenize request: a completion prompt with special
// tokens unless told otherwise, a conversation rendered by the chat
// template without them unless told otherwise (vLLM's defaults).
func (p *promptParser) tokenize(req *tokenizeRequest) ([]uint32, error) {
	switch {
	case req.Prompt != nil && present(req.Messages):
		return nil, fmt.Errorf("give prompt or messages, not both: %w", ErrBadRequest)
	case req.Prompt != nil:
		return p.encode(*req.Prompt, req.AddSpecialTokens == nil || *req.AddSpecialTokens)
	}
	fields := requestFields{Model: req.Model, Messages: req.Messages, Tools: req.Tools, ChatTemplateKwargs: req.ChatTemplateKwargs,
		AddGenerationPrompt: req.AddGenerationPrompt, ContinueFinalMessage: req.ContinueFinalMessage}
	cr, err := chatRequest(&fields)
	if err != nil {
		return nil, err
	}
	if p.tmpl == nil {
		return nil, &fieldError{param: "messages", msg: fmt.Sprintf("model %q has no chat template in the router", p.model)}
	}
	o := cr.Options()
	o.Preprocess = chattemplate.PreprocessVLLM
	text, err := p.tmpl.Render(cr.Messages, cr.Tools, o)
	if err != nil {
		return nil, fmt.Errorf("rendering chat template: %v: %w", err, ErrBadRequest)
	}
	return p.encode(text, req.AddSpecialTokens != nil && *req.AddSpecialTokens)
}

// detokenizeRequest is vLLM's DetokenizeRequest.
type detokenizeRequest struct {
	Model  string          `json:"model"`
	Tokens json.RawMessage `json:"tokens"`
}

// handleDetokenize answers POST /detokenize: the text of token ids, in
// vLLM's shape ({"prompt": ...}).
func (f *Frontend) handleDetokenize(rw http.ResponseWriter, r *http.Request) {
	body, ok := f.readBody(rw, r)
	if !ok {
		return
	}
	var req detokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		if fe, ok := jsonTypeError(err); ok {
			writeParseError(rw, fe, "")
			return
		}
		writeError(rw, http.StatusBadRequest, typeInvalidRequest, codeInvalidJSON, "", "invalid JSON body: "+err.Error())
		return
	}
	pp, _, err := f.parserFor(req.Model)
	if err != nil {
		writeParseError(rw, err, "model")
		return
	}
	dec, ok := pp.tok.(detokenizer)
	if !ok {
		writeParseError(rw, &fieldError{param: "model", msg: fmt.Sprintf("model %q: %v", req.Model, errNoTokenizer)}, "model")
		return
	}
	if !present(req.Tokens) {
		writeParseError(rw, &fieldError{param: "tokens", msg: "tokens is required"}, "tokens")
		return
	}
	ids, err := tokenIDs(req.Tokens)
	if err == nil {
		err = pp.checkCount(len(ids))
	}
	if v, ok := pp.tok.(vocabulary); ok && err == nil {
		n := v.VocabSize()
		for _, id := range ids {
			if int64(id) >= int64(n) {
				err = &fieldError{param: "tokens", msg: fmt.Sprintf("token id %d is outside the vocabulary (%d ids)", id, n)}
				break
			}
		}
	}
	if err != nil {
		writeParseError(rw, err, "tokens")
		return
	}
	writeJSON(rw, http.StatusOK, map[string]string{"prompt": dec.Decode(ids)})
}
