package chattemplate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"

	"github.com/ardanlabs/jinja"
)

// Template is a model's compiled chat template(s) plus the special tokens
// the template may reference. It is built once and is safe for concurrent
// use: every Render decodes its own values and shares nothing mutable.
type Template struct {
	def     *jinja.Template
	named   map[string]*jinja.Template
	tokens  SpecialTokens
	cfg     Config
	partsOK map[*jinja.Template]bool // template iterates over message content parts
}

// SpecialTokens are the tokenizer's special tokens as the template sees
// them (HuggingFace passes its special_tokens_map to the template). An
// empty string means "not set": the variable is then undefined, as in
// HuggingFace.
type SpecialTokens struct {
	BOS, EOS, UNK, PAD, SEP, CLS, MASK string
	// Additional is additional_special_tokens, in file order.
	Additional []string
}

// tokenizerConfig is the part of tokenizer_config.json this package reads.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage   `json:"chat_template"`
	BOS          json.RawMessage   `json:"bos_token"`
	EOS          json.RawMessage   `json:"eos_token"`
	UNK          json.RawMessage   `json:"unk_token"`
	PAD          json.RawMessage   `json:"pad_token"`
	SEP          json.RawMessage   `json:"sep_token"`
	CLS          json.RawMessage   `json:"cls_token"`
	MASK         json.RawMessage   `json:"mask_token"`
	Additional   []json.RawMessage `json:"additional_special_tokens"`
}

type namedTemplate struct {
	Name     string `json:"name"`
	Template string `json:"template"`
}

// Load builds a Template from the bytes of a HuggingFace
// tokenizer_config.json. chat_template may be one string or a list of
// {"name", "template"} objects; in the list form "default" is used unless
// tools are given and a "tool_use" template exists (HuggingFace's rule).
// Special tokens may be strings or {"content": ...} objects.
func Load(tokenizerConfig []byte, cfg Config) (*Template, error) {
	var tc tokenizerConfigParsed
	if err := tc.parse(tokenizerConfig); err != nil {
		return nil, err
	}
	if len(tc.templates) == 0 {
		return nil, fmt.Errorf("tokenizer_config.json has no chat_template: %w", ErrNoTemplate)
	}
	return compileSet(tc.templates, tc.tokens, cfg)
}

// SpecialTokensFromConfig reads only the special tokens of a
// tokenizer_config.json, for models whose template lives in a separate
// chat_template.jinja file (pass both to Compile).
func SpecialTokensFromConfig(tokenizerConfig []byte) (SpecialTokens, error) {
	var tc tokenizerConfigParsed
	if err := tc.parse(tokenizerConfig); err != nil {
		return SpecialTokens{}, err
	}
	return tc.tokens, nil
}

// Compile builds a Template from one Jinja source.
func Compile(source string, tokens SpecialTokens, cfg Config) (*Template, error) {
	return compileSet([]namedTemplate{{Name: "default", Template: source}}, tokens, cfg)
}

// Names lists the named templates available, sorted ("default" when the
// config had a single template).
func (t *Template) Names() []string {
	out := make([]string, 0, len(t.named))
	for n := range t.named {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

type tokenizerConfigParsed struct {
	templates []namedTemplate
	tokens    SpecialTokens
}

func (p *tokenizerConfigParsed) parse(data []byte) error {
	var tc tokenizerConfig
	if err := json.Unmarshal(data, &tc); err != nil {
		return fmt.Errorf("parsing tokenizer_config.json: %v: %w", err, ErrBadTemplate)
	}
	var err error
	for _, f := range []struct {
		raw json.RawMessage
		dst *string
		key string
	}{
		{tc.BOS, &p.tokens.BOS, "bos_token"}, {tc.EOS, &p.tokens.EOS, "eos_token"},
		{tc.UNK, &p.tokens.UNK, "unk_token"}, {tc.PAD, &p.tokens.PAD, "pad_token"},
		{tc.SEP, &p.tokens.SEP, "sep_token"}, {tc.CLS, &p.tokens.CLS, "cls_token"},
		{tc.MASK, &p.tokens.MASK, "mask_token"},
	} {
		if *f.dst, err = tokenContent(f.raw); err != nil {
			return fmt.Errorf("parsing tokenizer_config.json %s: %v: %w", f.key, err, ErrBadTemplate)
		}
	}
	for i, raw := range tc.Additional {
		s, err := tokenContent(raw)
		if err != nil {
			return fmt.Errorf("parsing tokenizer_config.json additional_special_tokens[%d]: %v: %w", i, err, ErrBadTemplate)
		}
		p.tokens.Additional = append(p.tokens.Additional, s)
	}
	switch raw := tc.ChatTemplate; {
	case len(raw) == 0 || string(raw) == "null":
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("parsing chat_template: %v: %w", err, ErrBadTemplate)
		}
		p.templates = []namedTemplate{{Name: "default", Template: s}}
	case raw[0] == '[':
		if err := json.Unmarshal(raw, &p.templates); err != nil {
			return fmt.Errorf("parsing chat_template list: %v: %w", err, ErrBadTemplate)
		}
	default:
		return fmt.Errorf("chat_template is neither a string nor a list: %w", ErrBadTemplate)
	}
	return nil
}

// tokenContent accepts a token written as a string, as null, or as an
// AddedToken object {"content": ...}.
func tokenContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("token is neither a string nor an object with content")
	}
	return *obj.Content, nil
}

// iteratesContent recognises templates that loop over a message's content
// parts (for part in message.content / message['content']), the same
// signal vLLM uses to decide between its "openai" and "string" content
// formats.
var iteratesContent = regexp.MustCompile(`for\s+\w+\s+in\s+\w+\s*(\.\s*content\b|\[\s*['"]content['"]\s*\])`)

func compileSet(list []namedTemplate, tokens SpecialTokens, cfg Config) (*Template, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("chat template config: %w", err)
	}
	t := &Template{
		named:   make(map[string]*jinja.Template, len(list)),
		tokens:  tokens,
		cfg:     cfg,
		partsOK: make(map[*jinja.Template]bool, len(list)),
	}
	for _, nt := range list {
		c, err := jinja.Compile(rewriteToJSON(nt.Template))
		if err != nil {
			return nil, fmt.Errorf("compiling chat template %q: %v: %w", nt.Name, err, ErrBadTemplate)
		}
		t.named[nt.Name] = c
		t.partsOK[c] = iteratesContent.MatchString(nt.Template)
	}
	t.def = t.named["default"]
	if t.def == nil && len(list) == 1 {
		t.def = t.named[list[0].Name]
	}
	if len(t.named) == 0 {
		return nil, fmt.Errorf("empty chat_template list: %w", ErrNoTemplate)
	}
	return t, nil
}

// pick chooses the template for one request, following HuggingFace's
// get_chat_template: an explicit name wins; otherwise "tool_use" when tools
// are given (even an empty list) and such a template exists; otherwise
// "default".
func (t *Template) pick(name string, toolsGiven bool) (*jinja.Template, error) {
	if name != "" {
		if c, ok := t.named[name]; ok {
			return c, nil
		}
		return nil, fmt.Errorf("no chat template named %q: %w", name, ErrNoTemplate)
	}
	if toolsGiven {
		if c, ok := t.named["tool_use"]; ok {
			return c, nil
		}
	}
	if t.def == nil {
		return nil, fmt.Errorf("chat_template list has no \"default\" template: %w", ErrNoTemplate)
	}
	return t.def, nil
}
