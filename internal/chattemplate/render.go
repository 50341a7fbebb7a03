package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/ardanlabs/jinja"
)

// Preprocess selects what happens to the OpenAI messages before the
// template sees them.
type Preprocess int

const (
	// PreprocessNone passes the messages to the template exactly as given,
	// as transformers' apply_chat_template does: content parts stay a
	// list, tool-call arguments given as a JSON string stay a string, null
	// content stays null. This is the default and the HuggingFace
	// reference behaviour.
	PreprocessNone Preprocess = iota

	// PreprocessVLLM rewrites the messages the way vLLM's OpenAI server
	// does before it renders (vllm/entrypoints/chat_utils.py): each
	// message is rebuilt from role, content, tool_calls, reasoning,
	// tool_call_id, name and task; content parts are joined with "\n"
	// into one string unless the template iterates over content parts;
	// null or missing content becomes ""; tool-call arguments given as a
	// JSON string are parsed into an object ({} when not valid JSON).
	// Use it to predict the exact prompt a vLLM worker will compute.
	PreprocessVLLM
)

// Options are the per-request inputs to Render besides messages and tools.
type Options struct {
	// AddGenerationPrompt appends the assistant header so the model
	// answers (OpenAI's and vLLM's default is true).
	AddGenerationPrompt bool

	// EnableThinking, when non-nil, is passed as the enable_thinking
	// template variable (Qwen3 renders an empty think block when false).
	EnableThinking *bool

	// Kwargs is a JSON object (vLLM's chat_template_kwargs); each key
	// becomes a template variable, with its value decoded in key order.
	// Empty or null means none. Keys named messages, tools,
	// add_generation_prompt or enable_thinking (when EnableThinking is
	// set) are overridden by the explicit inputs.
	Kwargs json.RawMessage

	// TemplateName selects a named template from a list-form
	// chat_template; empty picks as HuggingFace does.
	TemplateName string

	// Preprocess selects the message preprocessing; default PreprocessNone.
	Preprocess Preprocess

	// ContinueFinalMessage ends the prompt right after the final message's
	// text, without its end-of-turn marker, so the model continues that
	// message (transformers' continue_final_message). It requires
	// AddGenerationPrompt false.
	ContinueFinalMessage bool

	// Now is the time strftime_now formats; the zero value means the
	// wall clock at render time.
	Now time.Time
}

// Render renders the conversation. messages must be a JSON array of
// objects, each with a string "role"; tools, when not empty or null, must be
// a JSON array. JSON object key order is preserved throughout, so
// `tool | tojson` prints tool schemas exactly as the client sent them, with
// Python's ", " and ": " separators, as HuggingFace does.
func (t *Template) Render(messages, tools json.RawMessage, opts Options) (out string, err error) {
	if opts.ContinueFinalMessage && opts.AddGenerationPrompt {
		return "", fmt.Errorf("continue_final_message and add_generation_prompt cannot both be set: %w", ErrInvalidInput)
	}
	tmpl, vars, err := t.prepare(messages, tools, opts)
	if err != nil {
		return "", err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("template engine panicked: %v: %w", r, ErrRender)
		}
	}()
	out, err = tmpl.RenderValues(vars)
	if err != nil {
		var re *raisedError
		if errors.As(err, &re) {
			return "", fmt.Errorf("%s: %w", re.msg, ErrRaised)
		}
		return "", fmt.Errorf("%v: %w", err, ErrRender)
	}
	if opts.ContinueFinalMessage {
		msgs := vars["messages"].AsList().Items
		if len(msgs) == 0 {
			return "", fmt.Errorf("continue_final_message with no messages: %w", ErrInvalidInput)
		}
		c, _ := msgs[len(msgs)-1].AsDict().Get("content")
		return cutAfterFinal(out, c)
	}
	return out, nil
}

// inputs are the decoded request documents.
type inputs struct {
	msgs       []jinja.Value
	tools      jinja.Value
	toolsGiven bool
	kwargs     *jinja.Dict
}

func (t *Template) prepare(messages, tools json.RawMessage, opts Options) (*jinja.Template, map[string]jinja.Value, error) {
	cfg := t.cfg
	for _, in := range []struct {
		name string
		raw  json.RawMessage
	}{{"messages", messages}, {"tools", tools}, {"chat_template_kwargs", opts.Kwargs}} {
		if len(in.raw) > cfg.MaxInputBytes {
			return nil, nil, fmt.Errorf("%s is %d bytes, limit %d: %w", in.name, len(in.raw), cfg.MaxInputBytes, ErrInvalidInput)
		}
	}

	d := &decoder{maxDepth: cfg.MaxDepth}
	in, err := decodeInputs(d, messages, tools, opts.Kwargs, cfg)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := t.pick(opts.TemplateName, in.toolsGiven)
	if err != nil {
		return nil, nil, err
	}
	if opts.Preprocess == PreprocessVLLM {
		if err := vllmPreprocess(d, in.msgs, t.partsOK[tmpl]); err != nil {
			return nil, nil, err
		}
	}

	vars := make(map[string]jinja.Value, 16)
	t.tokens.addTo(vars)
	if in.kwargs != nil {
		for _, k := range in.kwargs.Keys {
			vars[k] = in.kwargs.Data[k]
		}
	}
	vars["messages"] = jinja.NewList(in.msgs)
	vars["tools"] = in.tools
	vars["documents"] = jinja.None() // transformers passes documents=None
	vars["add_generation_prompt"] = jinja.NewBool(opts.AddGenerationPrompt)
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	now := opts.Now
	for _, f := range pyFilters {
		vars[f.renamed] = f.fn
	}
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		ts := now
		if ts.IsZero() {
			ts = time.Now()
		}
		if len(args) == 0 || !args[0].IsString() {
			return jinja.Undefined(), errors.New("strftime_now: want one string argument")
		}
		return jinja.NewString(strftime(ts, args[0].AsString())), nil
	})
	vars["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception called"
		if len(args) > 0 {
			msg = printable(args[0])
		}
		return jinja.Undefined(), &raisedError{msg: msg}
	})
	return tmpl, vars, nil
}

// cutAfterFinal cuts the rendered prompt right after the final message's
// text, as transformers does for continue_final_message: the text is the
// content string, or the last part with a "text" key; the cut keeps the
// message's leading-space-trimmed text when the template preserved it,
// otherwise the fully trimmed text.
func cutAfterFinal(out string, content jinja.Value) (string, error) {
	final := ""
	switch {
	case content.IsString():
		final = content.AsString()
	case content.IsList():
		found := false
		items := content.AsList().Items
		for i := len(items) - 1; i >= 0; i-- {
			if items[i].IsDict() {
				if txt, ok := items[i].AsDict().Get("text"); ok {
					final, found = printable(txt), true
					break
				}
			}
		}
		if !found {
			return "", fmt.Errorf("continue_final_message: the final message has no text part: %w", ErrInvalidInput)
		}
	default:
		return "", fmt.Errorf("continue_final_message: the final message has no content: %w", ErrInvalidInput)
	}
	stripped := strings.TrimFunc(final, pyIsSpace)
	loc := strings.LastIndex(out, stripped)
	if loc < 0 {
		return "", fmt.Errorf("continue_final_message: the final message does not appear in the rendered prompt: %w", ErrRender)
	}
	// transformers compares out[loc:loc+len(lstrip(final))] with final,
	// which can only match when final has no leading white space.
	if strings.TrimLeftFunc(final, pyIsSpace) == final && strings.HasPrefix(out[loc:], final) {
		return out[:loc+len(final)], nil
	}
	return out[:loc+len(stripped)], nil
}

// pyIsSpace is Python's str.isspace for one character: Unicode white
// space plus the information separators U+001C..U+001F.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// decodeInputs decodes and shape-checks the three request documents.
func decodeInputs(d *decoder, messages, tools, kwargs json.RawMessage, cfg Config) (inputs, error) {
	var in inputs
	var err error
	if in.msgs, err = decodeMessages(d, messages, cfg); err != nil {
		return in, err
	}
	in.tools = jinja.None()
	in.toolsGiven = !isAbsent(tools)
	if in.toolsGiven {
		if in.tools, err = d.decode(tools); err != nil {
			return in, fmt.Errorf("decoding tools: %v: %w", err, ErrInvalidInput)
		}
		if !in.tools.IsList() {
			return in, fmt.Errorf("tools must be a JSON array: %w", ErrInvalidInput)
		}
	}
	if !isAbsent(kwargs) {
		kw, err := d.decode(kwargs)
		if err != nil {
			return in, fmt.Errorf("decoding chat_template_kwargs: %v: %w", err, ErrInvalidInput)
		}
		if !kw.IsDict() {
			return in, fmt.Errorf("chat_template_kwargs must be a JSON object: %w", ErrInvalidInput)
		}
		in.kwargs = kw.AsDict()
	}
	return in, nil
}

// decodeMessages checks the OpenAI shape the template relies on: an array
// of objects, each with a string role and a string, array or null content.
func decodeMessages(d *decoder, raw json.RawMessage, cfg Config) ([]jinja.Value, error) {
	if isAbsent(raw) {
		return nil, fmt.Errorf("messages is missing: %w", ErrInvalidInput)
	}
	v, err := d.decode(raw)
	if err != nil {
		return nil, fmt.Errorf("decoding messages: %v: %w", err, ErrInvalidInput)
	}
	if !v.IsList() {
		return nil, fmt.Errorf("messages must be a JSON array: %w", ErrInvalidInput)
	}
	items := v.AsList().Items
	if len(items) == 0 {
		// OpenAI requires at least one message, and templates index
		// messages[0] (Python's Jinja2 then fails).
		return nil, fmt.Errorf("messages is empty: %w", ErrInvalidInput)
	}
	if len(items) > cfg.MaxMessages {
		return nil, fmt.Errorf("%d messages, limit %d: %w", len(items), cfg.MaxMessages, ErrInvalidInput)
	}
	for i, m := range items {
		if !m.IsDict() {
			return nil, fmt.Errorf("messages[%d] is not an object: %w", i, ErrInvalidInput)
		}
		role, ok := m.AsDict().Get("role")
		if !ok || !role.IsString() {
			return nil, fmt.Errorf("messages[%d].role must be a string: %w", i, ErrInvalidInput)
		}
		if c, ok := m.AsDict().Get("content"); ok && !(c.IsString() || c.IsNone() || c.IsList()) {
			return nil, fmt.Errorf("messages[%d].content must be a string, an array of parts or null: %w", i, ErrInvalidInput)
		}
	}
	return items, nil
}

// addTo sets the special-token variables HuggingFace passes to every
// template (its special_tokens_map); unset tokens stay undefined. The
// additional tokens list is built anew per render because templates can
// mutate lists.
func (s SpecialTokens) addTo(vars map[string]jinja.Value) {
	for _, kv := range [...]struct{ k, v string }{
		{"bos_token", s.BOS}, {"eos_token", s.EOS}, {"unk_token", s.UNK}, {"pad_token", s.PAD},
		{"sep_token", s.SEP}, {"cls_token", s.CLS}, {"mask_token", s.MASK},
	} {
		if kv.v != "" {
			vars[kv.k] = jinja.NewString(kv.v)
		}
	}
	if len(s.Additional) > 0 {
		items := make([]jinja.Value, len(s.Additional))
		for i, a := range s.Additional {
			items[i] = jinja.NewString(a)
		}
		vars["additional_special_tokens"] = jinja.NewList(items)
	}
}

// pyToJSONValue is the shared, immutable callable for the tojson filter.
var pyToJSONValue = jinja.NewCallable("tojson", pyToJSON)

// raisedError carries the message of a template's raise_exception call.
type raisedError struct{ msg string }

func (e *raisedError) Error() string { return e.msg }

func printable(v jinja.Value) string {
	if v.IsString() {
		return v.AsString()
	}
	return v.String()
}

// isAbsent reports an omitted or null JSON document.
func isAbsent(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) == 0 || string(b) == "null"
}
