package frontend

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
)

// Sentinel errors of request parsing; the HTTP layer maps them to status
// codes (400, 404, 413).
var (
	// ErrBadRequest marks a malformed request (400).
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownModel marks a request for a model this router does not
	// serve (404 model_not_found).
	ErrUnknownModel = errors.New("model not found")
	// ErrPromptTooLong marks a prompt over MaxPromptTokens (413).
	ErrPromptTooLong = errors.New("prompt too long")
)

// requestFields are the fields of a completion or chat body the front door
// reads besides the prompt; everything else is forwarded untouched.
type requestFields struct {
	Model  string
	Prompt json.RawMessage
	// promptIDs holds Prompt decoded when it is a list of token ids
	// (decoded while the body's syntax is checked, in one pass).
	promptIDs           []uint32
	Stream              bool
	MaxTokens           *int
	MaxCompletionTokens *int
	// N is the number of choices asked for.
	N *int
	// The chat fields that decide the rendered prompt (raw JSON where
	// key order matters).
	Messages             json.RawMessage
	Tools                json.RawMessage
	ChatTemplateKwargs   json.RawMessage
	AddGenerationPrompt  *bool
	ContinueFinalMessage bool
	// Priority is vLLM's "priority" (lower first), for the admission
	// queue.
	Priority *int

	// CacheSalt is vLLM's cache_salt: the tenant's cache isolation key
	// (nil when absent; present and empty is refused, as vLLM does).
	CacheSalt *string
}

// expectedOutput is the request's max output tokens, 0 when unknown.
func (f *requestFields) expectedOutput() int {
	switch {
	case f.MaxTokens != nil && *f.MaxTokens > 0:
		return *f.MaxTokens
	case f.MaxCompletionTokens != nil && *f.MaxCompletionTokens > 0:
		return *f.MaxCompletionTokens
	}
	return 0
}

// prompt is a parsed prompt: token ids, and whether they came as ids.
type prompt struct {
	tokens  []uint32
	fromIDs bool
	// batch is the number of prompts in the request (only the first one
	// is routed on).
	batch int
	// model is the pool that routes it ("" the default model); approx
	// says tokens are textTokens (the model has no tokenizer).
	model  string
	approx bool
}

// promptParser turns request bodies into token ids within the limits.
type promptParser struct {
	model     string
	aliases   []string
	tok       Tokenizer
	tmpl      ChatTemplate
	maxTokens int
	// maxOutput bounds max_tokens and max_completion_tokens.
	maxOutput int
	// maxTokenBytes is the longest token's length in bytes (0 unknown):
	// a text of n bytes has at least ceil(n/maxTokenBytes) tokens.
	maxTokenBytes int
}

// checkModel accepts the served model, an alias, or an empty name.
func (p *promptParser) checkModel(name string) error {
	if name == "" || name == p.model {
		return nil
	}
	for _, a := range p.aliases {
		if a == name {
			return nil
		}
	}
	return fmt.Errorf("the model %q does not exist: %w", name, ErrUnknownModel)
}

// checkTextBound refuses a text that has more than maxTokens tokens for
// certain, judged by its byte length alone.
func (p *promptParser) checkTextBound(n int) error {
	if p.maxTokens == 0 || p.maxTokenBytes == 0 {
		return nil
	}
	if minTokens := (n + p.maxTokenBytes - 1) / p.maxTokenBytes; minTokens > p.maxTokens {
		return fmt.Errorf("prompt of %d bytes has at least %d tokens, more than the limit of %d: %w", n, minTokens, p.maxTokens, ErrPromptTooLong)
	}
	return nil
}

func (p *promptParser) checkCount(n int) error {
	if p.maxTokens > 0 && n > p.maxTokens {
		return fmt.Errorf("prompt has %d tokens, more than the limit of %d: %w", n, p.maxTokens, ErrPromptTooLong)
	}
	return nil
}

// encode tokenizes text within the limits; a tokenizer that can stop
// counting at the limit does (see limitedEncoder).
func (p *promptParser) encode(text string, special bool) ([]uint32, error) {
	if p.tok == nil {
		return textTokens(text), nil // bounded by the body size
	}
	if err := p.checkTextBound(len(text)); err != nil {
		return nil, err
	}
	if le, ok := p.tok.(limitedEncoder); ok && p.maxTokens > 0 {
		ids, ok := le.EncodeLimit(text, special, p.maxTokens)
		if !ok {
			return nil, fmt.Errorf("prompt has more than %d tokens, the limit: %w", p.maxTokens, ErrPromptTooLong)
		}
		return ids, nil
	}
	ids := p.tok.Encode(text, special)
	if err := p.checkCount(len(ids)); err != nil {
		return nil, err
	}
	return ids, nil
}

// completionPrompt reads OpenAI's completion prompt: a string, a list of
// token ids, a list of strings or a list of token-id lists. Batches are
// routed on their first prompt.
func (p *promptParser) completionPrompt(raw json.RawMessage) (prompt, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return prompt{}, fmt.Errorf("prompt is required: %w", ErrBadRequest)
	}
	switch raw[0] {
	case '"':
		s, err := jsonString(raw)
		if err != nil {
			return prompt{}, fmt.Errorf("prompt: %v: %w", err, ErrBadRequest)
		}
		ids, err := p.encode(s, true)
		return prompt{tokens: ids, batch: 1}, err
	case '[':
	default:
		return prompt{}, fmt.Errorf("prompt must be a string, a list of strings or a list of token ids: %w", ErrBadRequest)
	}
	// The first element decides the form: ids, texts or id lists.
	j := 1
	for j < len(raw) && (raw[j] == ' ' || raw[j] == '\t' || raw[j] == '\n' || raw[j] == '\r') {
		j++
	}
	if j < len(raw) && (raw[j] == '"' || raw[j] == '[') {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return prompt{}, fmt.Errorf("prompt: %v: %w", err, ErrBadRequest)
		}
		return p.batchPrompt(items)
	}
	if j < len(raw) && raw[j] == ']' {
		return prompt{}, fmt.Errorf("prompt must not be empty: %w", ErrBadRequest)
	}
	ids, err := tokenIDs(raw)
	if err != nil {
		return prompt{}, fmt.Errorf("prompt: %w", err)
	}
	return p.idsPrompt(ids)
}

// idsPrompt is a prompt given as token ids.
func (p *promptParser) idsPrompt(ids []uint32) (prompt, error) {
	if len(ids) == 0 {
		return prompt{}, fmt.Errorf("prompt must not be empty: %w", ErrBadRequest)
	}
	if err := p.checkCount(len(ids)); err != nil {
		return prompt{}, err
	}
	return prompt{tokens: ids, fromIDs: true, batch: 1}, nil
}

// batchPrompt routes a batch of prompts on its first one.
func (p *promptParser) batchPrompt(items []json.RawMessage) (prompt, error) {
	first := bytes.TrimSpace(items[0])
	if first[0] == '"' {
		var s string
		if err := json.Unmarshal(first, &s); err != nil {
			return prompt{}, fmt.Errorf("prompt[0]: %v: %w", err, ErrBadRequest)
		}
		ids, err := p.encode(s, true)
		return prompt{tokens: ids, batch: len(items)}, err
	}
	ids, err := tokenIDs(first)
	if err != nil {
		return prompt{}, fmt.Errorf("prompt[0]: %w", err)
	}
	if err := p.checkCount(len(ids)); err != nil {
		return prompt{}, err
	}
	return prompt{tokens: ids, fromIDs: true, batch: len(items)}, nil
}

// tokenIDs decodes a JSON list of token ids, each an integer in
// [0, 2^32), with a hand-written scanner: encoding/json spends
// milliseconds on an 8k-id list.
func tokenIDs(raw json.RawMessage) ([]uint32, error) {
	ids, end, err := scanIDs(raw, 0)
	if err != nil {
		return nil, err
	}
	for ; end < len(raw); end++ {
		if c := raw[end]; c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return nil, fmt.Errorf("token ids: trailing data at byte %d: %w", end, ErrBadRequest)
		}
	}
	return ids, nil
}

// isSpace reports JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

// scanIDs decodes the list of token ids starting at raw[i] (after
// optional whitespace) and returns the index just past its ']'. It is the
// hot loop of a token-id prompt, written without closures.
func scanIDs(raw []byte, i int) ([]uint32, int, error) {
	bad := func(what string, at int) error {
		return fmt.Errorf("token ids must be a list of integers in [0, 2^32): %s at byte %d: %w", what, at, ErrBadRequest)
	}
	n := len(raw)
	for i < n && isSpace(raw[i]) {
		i++
	}
	if i >= n || raw[i] != '[' {
		return nil, i, bad("no list", i)
	}
	i++
	for i < n && isSpace(raw[i]) {
		i++
	}
	if i < n && raw[i] == ']' {
		return []uint32{}, i + 1, nil
	}
	// Commas (SIMD-counted) bound the id count; the rest of the body may
	// add a few.
	ids := make([]uint32, 0, min(bytes.Count(raw[i:], []byte{','})+1, 1<<20))
	for {
		for i < n && isSpace(raw[i]) {
			i++
		}
		// Fast path: an id of 1 to 7 digits read eight bytes at a time
		// (an 8k-id prompt is ~50 KB of them), then its comma.
		if i+8 <= n {
			x := binary.LittleEndian.Uint64(raw[i:])
			if k := leadingDigits(x); k > 0 && k < 8 && (k == 1 || raw[i] != '0') {
				ids = append(ids, digitsValue(x, k))
				i += k
				if raw[i] == ',' {
					i++
					continue
				}
				goto separator
			}
		}
		{
			start := i
			var v uint64
			for i < n {
				d := raw[i] - '0'
				if d > 9 {
					break
				}
				v = v*10 + uint64(d)
				i++
				if v > math.MaxUint32 {
					return nil, start, bad("id out of range", start)
				}
			}
			if i == start || (raw[start] == '0' && i-start > 1) {
				return nil, start, bad("not a non-negative integer", start)
			}
			ids = append(ids, uint32(v))
		}
	separator:
		for i < n && isSpace(raw[i]) {
			i++
		}
		if i >= n {
			return nil, i, bad("unterminated list", i)
		}
		switch raw[i] {
		case ',':
			i++
		case ']':
			return ids, i + 1, nil
		default:
			return nil, i, bad("unexpected character", i)
		}
	}
}

// Word-at-a-time digit reading: x holds eight input bytes, the first in
// its lowest byte.
const (
	ones   = 0x0101010101010101
	nibHi  = 0xF0F0F0F0F0F0F0F0
	digits = 0x3030303030303030
)

// leadingDigits returns how many of x's bytes, from the first, are ASCII
// digits (0 to 8). A byte is a digit when its high nibble is 3 both as it
// is and plus 6 ('0'–'9' but not ':'–'?'); a carry out of a non-digit only
// disturbs the bytes after it, which are not counted.
func leadingDigits(x uint64) int {
	nd := (x&nibHi ^ digits) | ((x+6*ones)&nibHi ^ digits)
	return bits.TrailingZeros64(nd) / 8
}

// digitsValue returns the number written by x's first k bytes (1 <= k < 8,
// all digits): the digits are moved to the top bytes, the lower ones
// becoming leading zeros, and the eight are combined pairwise by
// multiplication.
func digitsValue(x uint64, k int) uint32 {
	x = (x & 0x0F0F0F0F0F0F0F0F) << (8 * (8 - k))
	x = (x * (10<<8 + 1)) >> 8 & 0x00FF00FF00FF00FF
	x = (x * (100<<16 + 1)) >> 16 & 0x0000FFFF0000FFFF
	return uint32((x * (10000<<32 + 1)) >> 32)
}

// chatPrompt renders a chat request with the model's template as vLLM's
// server would and tokenizes it.
func (p *promptParser) chatPrompt(f *requestFields) (prompt, error) {
	cr, err := chatRequest(f)
	if err != nil {
		return prompt{}, err
	}
	if err := p.checkModel(cr.Model); err != nil {
		return prompt{}, err
	}
	if p.tmpl == nil {
		// No template: the conversation as sent, which a longer
		// conversation extends.
		ids, err := p.encode(string(cr.Messages), false)
		return prompt{tokens: ids, batch: 1}, err
	}
	o := cr.Options()
	o.Preprocess = chattemplate.PreprocessVLLM
	text, err := p.tmpl.Render(cr.Messages, cr.Tools, o)
	if err != nil {
		return prompt{}, fmt.Errorf("rendering chat template: %v: %w", err, ErrBadRequest)
	}
	ids, err := p.encode(text, false)
	return prompt{tokens: ids, batch: 1}, err
}

// chatRequest builds the template's view of a chat body from the fields
// parseFields scanned, with chattemplate.ParseChatRequest's checks (it
// would decode the whole body once more).
func chatRequest(f *requestFields) (*chattemplate.ChatRequest, error) {
	absent := func(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }
	switch {
	case absent(f.Messages):
		return nil, &fieldError{param: "messages", msg: "messages is required"}
	case f.Messages[0] != '[':
		return nil, badType("messages", "an array of messages")
	case !absent(f.Tools) && f.Tools[0] != '[':
		return nil, badType("tools", "an array")
	case !absent(f.ChatTemplateKwargs) && f.ChatTemplateKwargs[0] != '{':
		return nil, badType("chat_template_kwargs", "an object")
	case f.ContinueFinalMessage && f.AddGenerationPrompt != nil && *f.AddGenerationPrompt:
		return nil, &fieldError{param: "continue_final_message", msg: "continue_final_message and add_generation_prompt cannot both be true"}
	}
	cr := &chattemplate.ChatRequest{Model: f.Model, Messages: f.Messages, Stream: f.Stream,
		AddGenerationPrompt: f.AddGenerationPrompt, ContinueFinalMessage: f.ContinueFinalMessage}
	if !absent(f.Tools) {
		cr.Tools = f.Tools
	}
	if !absent(f.ChatTemplateKwargs) {
		cr.ChatTemplateKwargs = f.ChatTemplateKwargs
	}
	return cr, nil
}
