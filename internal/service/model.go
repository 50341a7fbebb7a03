package service

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// Model is the served model's tokenizer and chat template: what the router
// uses to turn requests into token ids, and what `kvrouter up` gives its
// mock workers so that both sides count the same tokens.
type Model struct {
	// Tokenizer encodes prompts.
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat requests.
	Template *chattemplate.Template
}

// maxModelFile caps tokenizer.json and tokenizer_config.json.
const maxModelFile = 64 << 20

// LoadModel loads the tokenizer.json and tokenizer_config.json in dir, or
// the embedded Qwen3 files when dir is empty.
func LoadModel(dir string) (Model, error) {
	if dir == "" {
		tok, err := tokenizer.Default()
		if err != nil {
			return Model{}, fmt.Errorf("loading the embedded tokenizer: %w", err)
		}
		tmpl, err := chattemplate.Load(modelfiles.Qwen3TokenizerConfig(), chattemplate.DefaultConfig())
		if err != nil {
			return Model{}, fmt.Errorf("loading the embedded chat template: %w", err)
		}
		return Model{Tokenizer: tok, Template: tmpl}, nil
	}
	tj, err := readSmall(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return Model{}, err
	}
	tok, err := tokenizer.LoadJSONConfig(tj, tokenizer.DefaultConfig())
	if err != nil {
		return Model{}, fmt.Errorf("--tokenizer %s: tokenizer.json: %w", dir, err)
	}
	tc, err := readSmall(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return Model{}, err
	}
	tmpl, err := chattemplate.Load(tc, chattemplate.DefaultConfig())
	if err != nil {
		return Model{}, fmt.Errorf("--tokenizer %s: tokenizer_config.json: %w", dir, err)
	}
	return Model{Tokenizer: tok, Template: tmpl}, nil
}

func readSmall(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	if st.Size() > maxModelFile {
		return nil, fmt.Errorf("--tokenizer: %s is larger than %d bytes", path, maxModelFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %w", err)
	}
	return b, nil
}
