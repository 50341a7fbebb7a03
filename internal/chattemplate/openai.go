package chattemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ChatRequest is the part of an OpenAI /v1/chat/completions request body
// (with vLLM's extensions) that decides the rendered prompt. messages,
// tools and chat_template_kwargs stay raw JSON so that their key order
// reaches the template intact; everything else in the body is ignored here
// (the frontend forwards the original bytes).
type ChatRequest struct {
	// Model is the requested model name.
	Model string `json:"model"`
	// Messages is the conversation, a JSON array of message objects.
	Messages json.RawMessage `json:"messages"`
	// Tools is the JSON array of tool definitions, or absent.
	Tools json.RawMessage `json:"tools,omitempty"`
	// Stream asks for server-sent events.
	Stream bool `json:"stream,omitempty"`
	// AddGenerationPrompt is vLLM's add_generation_prompt; absent means true.
	AddGenerationPrompt *bool `json:"add_generation_prompt,omitempty"`
	// ContinueFinalMessage is vLLM's continue_final_message: the prompt
	// ends inside the final (assistant) message so the model continues it.
	ContinueFinalMessage bool `json:"continue_final_message,omitempty"`
	// ChatTemplateKwargs is vLLM's chat_template_kwargs, a JSON object
	// whose keys become template variables (e.g. {"enable_thinking": false}).
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
}

// ParseChatRequest decodes the rendering-relevant fields of a chat
// completion request body and checks their JSON types; Render checks the
// rest. Errors wrap ErrInvalidInput.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	var r ChatRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding chat request: %v: %w", err, ErrInvalidInput)
	}
	if firstByte(r.Messages) != '[' {
		return nil, fmt.Errorf("chat request: messages must be a JSON array: %w", ErrInvalidInput)
	}
	if !isAbsent(r.Tools) && firstByte(r.Tools) != '[' {
		return nil, fmt.Errorf("chat request: tools must be a JSON array: %w", ErrInvalidInput)
	}
	if !isAbsent(r.ChatTemplateKwargs) && firstByte(r.ChatTemplateKwargs) != '{' {
		return nil, fmt.Errorf("chat request: chat_template_kwargs must be a JSON object: %w", ErrInvalidInput)
	}
	if r.ContinueFinalMessage && r.AddGenerationPrompt != nil && *r.AddGenerationPrompt {
		return nil, fmt.Errorf("chat request: continue_final_message and add_generation_prompt cannot both be true: %w", ErrInvalidInput)
	}
	return &r, nil
}

// Options returns the render options the request asks for, with vLLM's
// defaults: add_generation_prompt true unless continue_final_message is set.
func (r *ChatRequest) Options() Options {
	agp := !r.ContinueFinalMessage
	if r.AddGenerationPrompt != nil {
		agp = *r.AddGenerationPrompt
	}
	return Options{
		AddGenerationPrompt:  agp,
		ContinueFinalMessage: r.ContinueFinalMessage,
		Kwargs:               r.ChatTemplateKwargs,
	}
}

// Render renders the request's conversation with t using r.Options() and
// the given preprocessing (PreprocessVLLM to predict a vLLM worker's
// prompt). Callers needing other options call t.Render themselves.
func (r *ChatRequest) Render(t *Template, preprocess Preprocess) (string, error) {
	o := r.Options()
	o.Preprocess = preprocess
	return t.Render(r.Messages, r.Tools, o)
}

func firstByte(raw json.RawMessage) byte {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return 0
	}
	return b[0]
}
