package modelfiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/modelfiles/qwen3"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// DefaultModel is the name the embedded model is served under.
const DefaultModel = qwen3.Name

// Qwen3TokenizerJSON returns the embedded Qwen3 tokenizer.json, decompressed
// (about 11 MB; each call decompresses anew).
func Qwen3TokenizerJSON() ([]byte, error) { return qwen3.TokenizerJSON() }

// Qwen3TokenizerConfig returns the embedded Qwen3 tokenizer_config.json,
// which holds the chat template. The slice is shared: do not modify it.
func Qwen3TokenizerConfig() []byte { return qwen3.TokenizerConfig() }

// Model is one model's tokenizer and chat template.
type Model struct {
	// Tokenizer encodes prompts; never nil.
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat requests; nil when the folder has no chat
	// template (completions with text or token ids still work).
	Template *chattemplate.Template
	// BOS and EOS are tokenizer_config.json's bos_token and eos_token
	// ("" when unset).
	BOS, EOS string
}

// Options tunes LoadDirOptions; the zero value is not valid, start from
// DefaultOptions.
type Options struct {
	Tokenizer tokenizer.Config
	Template  chattemplate.Config
}

// DefaultOptions returns the options LoadDir uses.
func DefaultOptions() Options {
	return Options{Tokenizer: tokenizer.DefaultConfig(), Template: chattemplate.DefaultConfig()}
}

// maxFile caps each file LoadDir reads (the largest real tokenizer.json
// files are about 35 MB).
const maxFile = 64 << 20

// LoadDir loads the model folder dir with DefaultOptions.
func LoadDir(dir string) (*Model, error) { return LoadDirOptions(dir, DefaultOptions()) }

// LoadDirOptions loads tokenizer.json, tokenizer_config.json and, when
// tokenizer_config.json has no chat_template, chat_template.jinja from dir.
func LoadDirOptions(dir string, o Options) (*Model, error) {
	tj, err := readFile(dir, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	tc, err := readFile(dir, "tokenizer_config.json")
	if errors.Is(err, fs.ErrNotExist) {
		tc, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	jinjaSrc, err := readFile(dir, "chat_template.jinja")
	if errors.Is(err, fs.ErrNotExist) {
		jinjaSrc, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	m, err := Load(tj, tc, jinjaSrc, o)
	if err != nil {
		return nil, fmt.Errorf("model folder %s: %w", dir, err)
	}
	return m, nil
}

// Load builds a Model from the bytes of tokenizer.json, tokenizer_config.json
// (nil when absent) and chat_template.jinja (nil when absent; used only when
// tokenizer_config.json has no chat_template).
func Load(tokenizerJSON, tokenizerConfig, chatTemplateJinja []byte, o Options) (*Model, error) {
	tok, err := tokenizer.LoadJSONConfig(tokenizerJSON, o.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	m := &Model{Tokenizer: tok}
	if tokenizerConfig == nil {
		if chatTemplateJinja != nil {
			if m.Template, err = chattemplate.Compile(string(chatTemplateJinja), chattemplate.SpecialTokens{}, o.Template); err != nil {
				return nil, fmt.Errorf("chat_template.jinja: %w", err)
			}
		}
		return m, nil
	}
	var cfg configJSON
	if err := json.Unmarshal(tokenizerConfig, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	tokens, err := chattemplate.SpecialTokensFromConfig(tokenizerConfig)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	m.BOS, m.EOS = tokens.BOS, tokens.EOS
	m.Template, err = chattemplate.Load(tokenizerConfig, o.Template)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate) && chatTemplateJinja != nil:
		if m.Template, err = chattemplate.Compile(string(chatTemplateJinja), tokens, o.Template); err != nil {
			return nil, fmt.Errorf("chat_template.jinja: %w", err)
		}
	case errors.Is(err, chattemplate.ErrNoTemplate):
		m.Template = nil
	case err != nil:
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if (cfg.TokenizerClass == "LlamaTokenizer" || cfg.TokenizerClass == "LlamaTokenizerFast") && cfg.AddPrefixSpace != nil {
		// transformers then rebuilds the tokenizer from the SentencePiece
		// model (from_slow), which tokenizer.json does not describe.
		return nil, fmt.Errorf("tokenizer_config.json: add_prefix_space with %s (transformers converts the slow SentencePiece tokenizer instead of reading tokenizer.json): %w", cfg.TokenizerClass, tokenizer.ErrUnsupported)
	}
	if rebuildsPostProcessor[cfg.TokenizerClass] {
		if m.Tokenizer, err = withBOSEOS(tok, m.BOS, m.EOS, cfg.AddBOS == nil || *cfg.AddBOS, cfg.AddEOS != nil && *cfg.AddEOS); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	return m, nil
}

// configJSON is the part of tokenizer_config.json Load reads itself (the
// chat template and special tokens are chattemplate's).
type configJSON struct {
	TokenizerClass string `json:"tokenizer_class"`
	AddBOS         *bool  `json:"add_bos_token"`
	AddEOS         *bool  `json:"add_eos_token"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
}

// rebuildsPostProcessor lists the tokenizer classes whose transformers
// implementation replaces tokenizer.json's post-processor with BOS/EOS
// from add_bos_token and add_eos_token (see the package documentation).
var rebuildsPostProcessor = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true,
	"CodeLlamaTokenizer": true, "CodeLlamaTokenizerFast": true,
	"GemmaTokenizer": true, "GemmaTokenizerFast": true,
}

// withBOSEOS returns tok adding bos before and eos after the text, as asked.
func withBOSEOS(tok *tokenizer.Tokenizer, bos, eos string, addBOS, addEOS bool) (*tokenizer.Tokenizer, error) {
	var prefix, suffix []uint32
	if addBOS {
		id, ok := tok.TokenToID(bos)
		if bos == "" || !ok {
			return nil, fmt.Errorf("add_bos_token with bos_token %q, which is not a token", bos)
		}
		prefix = []uint32{id}
	}
	if addEOS {
		id, ok := tok.TokenToID(eos)
		if eos == "" || !ok {
			return nil, fmt.Errorf("add_eos_token with eos_token %q, which is not a token", eos)
		}
		suffix = []uint32{id}
	}
	return tok.WithSpecialTokens(prefix, suffix), nil
}

func readFile(dir, name string) ([]byte, error) {
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFile)
	}
	return b, nil
}

var (
	defaultOnce  sync.Once
	defaultModel *Model
	defaultErr   error
)

// Default returns the embedded default model (Qwen3), loaded on first use
// and shared afterwards (its tokenizer is tokenizer.Default()).
func Default() (*Model, error) {
	defaultOnce.Do(func() {
		tok, err := tokenizer.Default()
		if err != nil {
			defaultErr = fmt.Errorf("embedded tokenizer: %w", err)
			return
		}
		tmpl, err := chattemplate.Load(qwen3.TokenizerConfig(), chattemplate.DefaultConfig())
		if err != nil {
			defaultErr = fmt.Errorf("embedded chat template: %w", err)
			return
		}
		tokens, err := chattemplate.SpecialTokensFromConfig(qwen3.TokenizerConfig())
		if err != nil {
			defaultErr = fmt.Errorf("embedded tokenizer_config.json: %w", err)
			return
		}
		defaultModel = &Model{Tokenizer: tok, Template: tmpl, BOS: tokens.BOS, EOS: tokens.EOS}
	})
	return defaultModel, defaultErr
}
