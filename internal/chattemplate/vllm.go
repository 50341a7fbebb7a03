package chattemplate

import (
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// vllmPreprocess rewrites msgs in place as vLLM's OpenAI server does before
// rendering (chat_utils.py: _parse_chat_message_content and
// _postprocess_messages). partsFormat is vLLM's "openai" content format
// (the template iterates over content parts); otherwise the "string"
// format is used and text parts are joined with "\n". Non-text parts
// (images, audio) are refused: their placeholders are model-specific.
func vllmPreprocess(dec *decoder, msgs []jinja.Value, partsFormat bool) error {
	for i, m := range msgs {
		in := m.AsDict()
		role, _ := in.Get("role")
		content, _ := in.Get("content")
		texts, err := contentTexts(content)
		if err != nil {
			return fmt.Errorf("messages[%d].content: %v: %w", i, err, ErrInvalidInput)
		}

		out := jinja.NewDict()
		d := out.AsDict()
		d.Set("role", role)
		if partsFormat {
			parts := make([]jinja.Value, len(texts))
			for j, s := range texts {
				p := jinja.NewDict()
				p.AsDict().Set("type", jinja.NewString("text"))
				p.AsDict().Set("text", jinja.NewString(s))
				parts[j] = p
			}
			d.Set("content", jinja.NewList(parts))
		} else {
			d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
		}

		switch role.AsString() {
		case "assistant":
			if tc, ok := in.Get("tool_calls"); ok && !tc.IsNone() && !tc.IsUndefined() {
				if err := parseToolArguments(dec, tc); err != nil {
					return fmt.Errorf("messages[%d].tool_calls: %v: %w", i, err, ErrInvalidInput)
				}
				if !tc.IsList() || tc.AsList().Len() > 0 {
					d.Set("tool_calls", tc)
				}
			}
			if r, ok := in.Get("reasoning"); ok && !r.IsNone() && !r.IsUndefined() {
				d.Set("reasoning", r)
				d.Set("reasoning_content", r)
			}
		case "tool":
			if id, ok := in.Get("tool_call_id"); ok {
				d.Set("tool_call_id", id)
			}
			if partsFormat {
				d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
			}
		}
		for _, k := range []string{"name", "task"} {
			if v, ok := in.Get(k); ok && v.IsString() {
				d.Set(k, v)
			}
		}
		if role.AsString() == "developer" {
			if v, ok := in.Get("tools"); ok {
				d.Set("tools", v)
			} else {
				d.Set("tools", jinja.None())
			}
		}
		msgs[i] = out
	}
	return nil
}

// contentTexts returns the text pieces of an OpenAI content value: a string
// is one piece, null or missing is none, and a list contributes each
// string element and each text-like part (text, input_text, output_text,
// refusal, thinking); parts whose text is null are skipped as vLLM does.
func contentTexts(c jinja.Value) ([]string, error) {
	switch {
	case c.IsUndefined() || c.IsNone():
		return nil, nil
	case c.IsString():
		return []string{c.AsString()}, nil
	case c.IsList():
	default:
		return nil, fmt.Errorf("must be a string, an array of parts or null")
	}
	var texts []string
	for j, p := range c.AsList().Items {
		if p.IsString() {
			texts = append(texts, p.AsString())
			continue
		}
		if !p.IsDict() {
			return nil, fmt.Errorf("part %d is not an object", j)
		}
		pd := p.AsDict()
		typ, _ := pd.Get("type")
		if !typ.IsString() {
			return nil, fmt.Errorf("part %d has no string type", j)
		}
		field := ""
		switch typ.AsString() {
		case "text", "input_text", "output_text":
			field = "text"
		case "refusal":
			field = "refusal"
		case "thinking":
			field = "thinking"
		default:
			return nil, fmt.Errorf("part %d has unsupported type %q (only text parts can be rendered)", j, typ.AsString())
		}
		v, ok := pd.Get(field)
		switch {
		case !ok || v.IsNone():
			continue
		case v.IsString():
			texts = append(texts, v.AsString())
		default:
			return nil, fmt.Errorf("part %d: %s is not a string", j, field)
		}
	}
	return texts, nil
}

// parseToolArguments replaces each tool call's function.arguments, when it
// is a string, by the JSON value it holds ({} if it is not valid JSON), and
// any other non-object, non-array arguments by {} (vLLM's rule: templates
// expect an object).
func parseToolArguments(dec *decoder, tc jinja.Value) error {
	if !tc.IsList() {
		return fmt.Errorf("must be an array")
	}
	for j, call := range tc.AsList().Items {
		if !call.IsDict() {
			return fmt.Errorf("tool call %d is not an object", j)
		}
		fn, ok := call.AsDict().Get("function")
		if !ok || !fn.IsDict() {
			return fmt.Errorf("tool call %d has no function object", j)
		}
		args, _ := fn.AsDict().Get("arguments")
		switch {
		case args.IsString():
			v, err := dec.decode([]byte(args.AsString()))
			if err != nil {
				v = jinja.NewDict()
			}
			fn.AsDict().Set("arguments", v)
		case args.IsDict() || args.IsList():
		default:
			fn.AsDict().Set("arguments", jinja.NewDict())
		}
	}
	return nil
}
